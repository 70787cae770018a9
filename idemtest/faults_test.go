package idemtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestFaultWireBehaviour(t *testing.T) {
	const (
		transportError = -1
		internalBody   = `{"error":"internal"}`
	)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		fault          Fault
		wantFirst      int    // status of the faulted answer, or transportError
		wantRetryAfter string // on the faulted answer
		wantFirstBody  string // exact, if set
		wantExecuted   int    // ExecutionsFor after the faulted answer
		wantFinal      int    // ExecutionsFor after the resend
		wantSecond     int    // status of a resend with the same key (no fault)
		wantReplayed   bool   // whether that resend is a replay
		wantStored     int    // response_status reported by the status endpoint
	}{
		{FaultNone, http.StatusCreated, "", "", 1, 1, http.StatusCreated, true, http.StatusCreated},
		{Fault503, http.StatusServiceUnavailable, "2", `{"error":"service_unavailable"}`, 0, 1, http.StatusCreated, false, http.StatusCreated},
		{Fault503Date, http.StatusServiceUnavailable, "Sun, 01 Mar 2026 12:00:02 GMT", `{"error":"service_unavailable"}`, 0, 1, http.StatusCreated, false, http.StatusCreated},
		{Fault429, http.StatusTooManyRequests, "2", `{"error":"rate_limited"}`, 0, 1, http.StatusCreated, false, http.StatusCreated},
		{Fault502BeforeProcessing, http.StatusBadGateway, "", `{"error":"bad_gateway"}`, 0, 1, http.StatusCreated, false, http.StatusCreated},
		{FaultResetBeforeProcessing, transportError, "", "", 0, 1, http.StatusCreated, false, http.StatusCreated},
		{FaultDropAfterCommit, transportError, "", "", 1, 1, http.StatusCreated, true, http.StatusCreated},
		{FaultSlow, http.StatusCreated, "", "", 1, 1, http.StatusCreated, true, http.StatusCreated},
		{Fault500AfterCommit, http.StatusInternalServerError, "", internalBody, 1, 1, http.StatusCreated, true, http.StatusCreated},
		{FaultStored500, http.StatusInternalServerError, "", "", 0, 0, http.StatusInternalServerError, true, http.StatusInternalServerError},
	}
	for _, tt := range tests {
		t.Run(tt.fault.String(), func(t *testing.T) {
			s := newTestServer(t, Config{SlowDelay: -1, RetryAfter: 2, Now: func() time.Time { return now }})
			s.Script(tt.fault)
			c := call{key: "k", tenant: "Bearer sk_acme", body: paymentBody(100, "ref")}

			first := do(t, s.URL, c)
			if tt.wantFirst == transportError {
				if first.err == nil {
					t.Fatalf("want a transport error, got %d %s", first.status, first.body)
				}
				if !errors.Is(first.err, syscall.ECONNRESET) {
					t.Errorf("error %v is not a connection reset", first.err)
				}
			} else {
				wantStatus(t, first, tt.wantFirst)
				if ra := first.header.Get("Retry-After"); ra != tt.wantRetryAfter {
					t.Errorf("Retry-After = %q, want %q", ra, tt.wantRetryAfter)
				}
				if tt.wantFirstBody != "" && string(first.body) != tt.wantFirstBody {
					t.Errorf("body = %s, want %s", first.body, tt.wantFirstBody)
				}
				if first.replayed() {
					t.Error("first answer marked replayed")
				}
			}
			wantInt(t, "ExecutionsFor after the fault", s.ExecutionsFor("k"), tt.wantExecuted)
			wantInt(t, "AttemptsFor after the fault", s.AttemptsFor("k"), 1) // no hidden replay

			second := do(t, s.URL, c)
			wantStatus(t, second, tt.wantSecond)
			if second.replayed() != tt.wantReplayed {
				t.Errorf("resend replayed = %v, want %v", second.replayed(), tt.wantReplayed)
			}
			if tt.fault == FaultStored500 && !bytes.Equal(second.body, first.body) {
				t.Errorf("stored 500 replayed as %s, first was %s", second.body, first.body)
			}
			wantInt(t, "ExecutionsFor after the resend", s.ExecutionsFor("k"), tt.wantFinal)

			st := status(t, s.URL, c.tenant, "k")
			wantStatus(t, st, http.StatusOK)
			want := fmt.Sprintf(`{"status":"completed","response_status":%d,"response_body":%s}`, tt.wantStored, second.body)
			if string(st.body) != want {
				t.Errorf("status = %s, want %s", st.body, want)
			}

			faults := s.Stats().Faults
			if tt.fault == FaultNone {
				wantInt(t, "faults counted", len(faults), 0)
			} else if len(faults) != 1 || faults[tt.fault] != 1 {
				t.Errorf("Stats.Faults = %v, want %v once", faults, tt.fault)
			}
		})
	}
}

func TestFault503DateCarriesHTTPDate(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 250e6, time.FixedZone("CET", 3600))
	tests := []struct {
		retryAfter int
		want       string
	}{
		{0, "Sun, 01 Mar 2026 11:00:02 GMT"},  // default 1s, rounded up
		{5, "Sun, 01 Mar 2026 11:00:06 GMT"},  // 5.25s rounded up
		{-1, "Sun, 01 Mar 2026 11:00:01 GMT"}, // 0s still rounded up, never earlier than now
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.retryAfter), func(t *testing.T) {
			s := newTestServer(t, Config{RetryAfter: tt.retryAfter, Now: func() time.Time { return now }})
			s.Script(Fault503Date)
			r := do(t, s.URL, call{key: "k", body: paymentBody(1, "r")})
			wantStatus(t, r, http.StatusServiceUnavailable)
			ra := r.header.Get("Retry-After")
			if ra != tt.want {
				t.Errorf("Retry-After = %q, want %q", ra, tt.want)
			}
			at, err := http.ParseTime(ra)
			if err != nil {
				t.Fatalf("Retry-After %q is not an HTTP-date: %v", ra, err)
			}
			if at.Before(now) {
				t.Errorf("Retry-After %v is before now %v", at, now)
			}
		})
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for _, tt := range []struct {
		cfg  int
		want string
	}{{0, "1"}, {-1, "0"}, {7, "7"}} {
		s := newTestServer(t, Config{RetryAfter: tt.cfg})
		s.Script(Fault503, Fault429)
		for range 2 {
			if got := do(t, s.URL, call{key: "k", body: paymentBody(1, "r")}).header.Get("Retry-After"); got != tt.want {
				t.Errorf("RetryAfter %d: header = %q, want %q", tt.cfg, got, tt.want)
			}
		}
	}
}

func TestScriptIsFIFOAndFaultsPrecedeKeyChecks(t *testing.T) {
	s := newTestServer(t, Config{})
	s.Script(Fault503, Fault429)
	s.Script(Fault502BeforeProcessing)
	var got []int
	for range 4 {
		got = append(got, do(t, s.URL, call{body: paymentBody(1, "r")}).status) // no key at all
	}
	want := []int{503, 429, 502, 400}
	if !slices.Equal(got, want) {
		t.Errorf("statuses = %v, want %v", got, want)
	}
}

func TestFaultsOnACompletedKey(t *testing.T) {
	s := newTestServer(t, Config{SlowDelay: time.Hour})
	c := call{key: "k", body: paymentBody(1, "r")}
	first := do(t, s.URL, c)
	wantStatus(t, first, http.StatusCreated)

	// A before-processing fault still applies to a completed key.
	s.Script(Fault503)
	wantStatus(t, do(t, s.URL, c), http.StatusServiceUnavailable)

	// After-commit faults on a replay just replay (and are not counted).
	for _, f := range []Fault{FaultDropAfterCommit, Fault500AfterCommit, FaultStored500, FaultSlow} {
		s.Script(f)
		r := do(t, s.URL, c)
		wantStatus(t, r, http.StatusCreated)
		if !r.replayed() || !bytes.Equal(r.body, first.body) {
			t.Errorf("%v on a completed key: replayed=%v body=%s", f, r.replayed(), r.body)
		}
	}
	wantInt(t, "ExecutionsFor", s.ExecutionsFor("k"), 1)
	if f := s.Stats().Faults; len(f) != 1 || f[Fault503] != 1 {
		t.Errorf("Stats.Faults = %v, want only 503", f)
	}
}

func TestSlowHoldsTheKeyUntilClose(t *testing.T) {
	s := NewServer(Config{SlowDelay: time.Minute})
	defer s.Close()
	s.Script(FaultSlow)
	c := call{key: "slow", body: paymentBody(10, "r")}
	done := make(chan reply, 1)
	go func() { done <- do(t, s.URL, c) }()

	eventually(t, "the slow request to claim its key", func() bool {
		return status(t, s.URL, "", "slow").status == http.StatusAccepted
	})
	busy := do(t, s.URL, c)
	wantStatus(t, busy, http.StatusConflict)
	if busy.errorCode(t) != "request_in_progress" || busy.header.Get("Retry-After") != "1" {
		t.Errorf("409 body %s, Retry-After %q", busy.body, busy.header.Get("Retry-After"))
	}
	wantStatus(t, do(t, s.URL, call{key: "slow", body: paymentBody(11, "r")}), http.StatusUnprocessableEntity)

	start := time.Now()
	s.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v with a slow request pending", d)
	}
	wantStatus(t, <-done, http.StatusServiceUnavailable)
	wantInt(t, "ExecutionsFor", s.ExecutionsFor("slow"), 0)
	wantInt(t, "InProgress", s.Stats().InProgress, 1)
}

func TestSlowOutlivesTheClient(t *testing.T) {
	s := newTestServer(t, Config{SlowDelay: 100 * time.Millisecond})
	s.Script(FaultSlow)
	c := call{key: "slow", body: paymentBody(10, "r")}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+PaymentsPath, bytes.NewReader([]byte(c.body)))
		req.Header.Set(DefaultKeyHeader, c.key)
		resp, err := newClient().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	eventually(t, "the slow request to claim its key", func() bool {
		return status(t, s.URL, "", "slow").status == http.StatusAccepted
	})
	cancel() // the client hangs up while the server holds the request
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("client error = %v, want context.Canceled", err)
	}
	wantInt(t, "ExecutionsFor right after the hang-up", s.ExecutionsFor("slow"), 0)
	eventually(t, "the abandoned request to execute", func() bool { return s.ExecutionsFor("slow") == 1 })
	// The charge is in the ledger a moment before the middleware stores its answer: until
	// then the key is in progress (409), which a resend met about once in 70 runs.
	eventually(t, "the abandoned request's answer to be stored", func() bool {
		return status(t, s.URL, "", "slow").status == http.StatusOK
	})

	r := do(t, s.URL, c)
	wantStatus(t, r, http.StatusCreated)
	if !r.replayed() {
		t.Error("resend after the slow execution was not a replay")
	}
	wantInt(t, "ExecutionsFor", s.ExecutionsFor("slow"), 1)
}

// sequence sends n sequential requests with fresh keys and returns their statuses.
func sequence(t *testing.T, cfg Config, n int) ([]int, Stats) {
	s := newTestServer(t, cfg)
	got := make([]int, n)
	for i := range got {
		got[i] = do(t, s.URL, call{key: fmt.Sprint("k", i), body: paymentBody(1, "r")}).status
	}
	return got, s.Stats()
}

func TestRandomFaultsAreDeterministicPerSeed(t *testing.T) {
	cfg := Config{FaultRate: 0.5, Seed: 42, Faults: []Fault{Fault503, Fault429, Fault502BeforeProcessing}}
	a, stats := sequence(t, cfg, 40)
	b, _ := sequence(t, cfg, 40)
	if !slices.Equal(a, b) {
		t.Fatalf("same seed, different faults:\n%v\n%v", a, b)
	}
	cfg.Seed = 43
	if c, _ := sequence(t, cfg, 40); slices.Equal(a, c) {
		t.Errorf("seeds 42 and 43 gave the same faults: %v", a)
	}

	counts := map[int]int{}
	for _, st := range a {
		counts[st]++
	}
	if counts[201] == 0 || counts[201] == 40 || len(counts) != 4 {
		t.Errorf("statuses %v do not mix successes and all three faults", counts)
	}
	wantInt(t, "Executions", stats.Executions, counts[201])
	wantInt(t, "503 faults", stats.Faults[Fault503], counts[503])
	wantInt(t, "429 faults", stats.Faults[Fault429], counts[429])
	wantInt(t, "502 faults", stats.Faults[Fault502BeforeProcessing], counts[502])
}

// TestRandomFaultsNeverExecuteTwice is the oracle in miniature: every fault, resend with
// the same key until a final answer; no key ever executes twice.
func TestRandomFaultsNeverExecuteTwice(t *testing.T) {
	s := newTestServer(t, Config{FaultRate: 0.6, Seed: 7, SlowDelay: -1})
	const intents = 60
	for i := range intents {
		c := call{key: fmt.Sprint("intent-", i), tenant: "Bearer sk_acme", body: paymentBody(100+i, fmt.Sprint("order-", i))}
		var last reply
		for attempt := 0; ; attempt++ {
			if attempt == 50 {
				t.Fatalf("%s: no final answer after 50 attempts", c.key)
			}
			last = do(t, s.URL, c)
			if last.err == nil && (last.status == http.StatusCreated || last.replayed()) {
				break
			}
		}
		want := 1
		if last.status == http.StatusInternalServerError { // stored 500: charged or not, unknown to a client
			want = s.ExecutionsFor(c.key)
			if want > 1 {
				t.Errorf("%s: stored 500 after %d executions", c.key, want)
			}
			found := search(t, s.URL, c.tenant, fmt.Sprint("order-", i))
			wantInt(t, c.key+" found by the search", len(found), want)
		}
		wantInt(t, c.key+" executions", s.ExecutionsFor(c.key), want)
		wantInt(t, c.key+" by reference", s.ExecutionsByReference(fmt.Sprint("order-", i)), want)
	}
	st := s.Stats()
	if len(st.Faults) < len(AllFaults()) {
		t.Errorf("only %d fault kinds drawn: %v", len(st.Faults), st)
	}
	wantInt(t, "Requests", st.Requests, s.Attempts())
	t.Log(st)
}

func TestFaultNames(t *testing.T) {
	seen := map[string]bool{}
	for f := FaultNone; f < numFaults; f++ {
		name := f.String()
		if name == "" || seen[name] {
			t.Errorf("fault %d has an empty or duplicate name %q", int(f), name)
		}
		seen[name] = true
	}
	if got := Fault(99).String(); got != "Fault(99)" {
		t.Errorf("Fault(99).String() = %q", got)
	}
	var before []Fault
	for _, f := range AllFaults() {
		if f.BeforeProcessing() {
			before = append(before, f)
		}
	}
	want := []Fault{Fault503, Fault503Date, Fault429, FaultResetBeforeProcessing, Fault502BeforeProcessing}
	if !slices.Equal(before, want) {
		t.Errorf("before-processing faults = %v, want %v", before, want)
	}
	if slices.Contains(AllFaults(), FaultNone) || len(AllFaults()) != int(numFaults)-1 {
		t.Errorf("AllFaults() = %v", AllFaults())
	}
}

func TestInvalidConfigPanics(t *testing.T) {
	tests := map[string]func(){
		"FaultRate above 1":          func() { NewHandler(Config{FaultRate: 1.5}) },
		"FaultRate negative":         func() { NewHandler(Config{FaultRate: -0.1}) },
		"FaultRate NaN":              func() { NewHandler(Config{FaultRate: math.NaN()}) },
		"KeyStatusFaultRate above 1": func() { NewHandler(Config{KeyStatusFaultRate: 2}) },
		"unknown fault":              func() { NewHandler(Config{Faults: []Fault{Fault(99)}}) },
		"relative path":              func() { NewHandler(Config{Paths: []string{"v1/payments"}}) },
		"trailing slash":             func() { NewHandler(Config{Paths: []string{"/v1/payments/"}}) },
		"unknown scripted fault":     func() { NewHandler(Config{}).Script(Fault(-1)) },
	}
	for name, f := range tests {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		})
	}
}

func TestStatsString(t *testing.T) {
	s := newTestServer(t, Config{})
	s.Script(Fault503, FaultNone, Fault429)
	for range 4 { // 503, 201, 429, replay
		do(t, s.URL, call{key: "k", body: paymentBody(1, "r")})
	}
	do(t, s.URL, call{key: "k", body: paymentBody(2, "r")}) // 422
	status(t, s.URL, "", "k")
	search(t, s.URL, "", "r")
	want := "requests=5 executions=1 replays=1 in_progress=0 key_reused=1 bad_requests=0 status_checks=1 status_faults=0 searches=1 503=1 429=1"
	if got := s.Stats().String(); got != want {
		t.Errorf("Stats() = %q\nwant       %q", got, want)
	}
}
