package servertest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
)

func testReplay(t *testing.T, b idemserver.Backend) {
	s := newServer(t, b, nil, nil)
	first := s.post(t, "acct_1", "k-replay", `{"amount":500}`)
	wantAnswer(t, "first", first, 201, `{"id":"ch_1","amount":500}`)
	if first.header.Get(idemserver.ReplayedHeader) != "" || first.header.Get("Set-Cookie") != "session=secret" || first.header.Get("X-Request-Id") != "req_1" {
		t.Fatalf("first answer headers: %v", first.header)
	}
	for i := 0; i < 3; i++ {
		again := s.post(t, "acct_1", `"k-replay"`, `{"amount":500}`) // sf-string form: the same key
		wantAnswer(t, "replay", again, 201, first.body)
		if again.header.Get(idemserver.ReplayedHeader) != "true" || again.header.Get("Location") != "/v1/payments/ch_1" ||
			again.header.Get("Content-Type") != "application/json" || again.header.Get("Content-Length") != "26" {
			t.Fatalf("replay headers: %v", again.header)
		}
		if again.header.Get("Set-Cookie") != "" || again.header.Get("X-Request-Id") != "" {
			t.Fatalf("replay carries headers outside the allow-list: %v", again.header)
		}
	}
	if n := s.execs.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
	if st := s.mw.Stats(); st.Executed != 1 || st.Replays != 3 {
		t.Fatalf("stats %+v, want Executed 1 Replays 3", st)
	}
}

// testReplayHeaderBytes: a stored header value that is not UTF-8 (HTTP allows such bytes, as
// in a Latin-1 Location) is replayed byte for byte, not with U+FFFD in their place.
func testReplayHeaderBytes(t *testing.T, b idemserver.Backend) {
	const location = "/v1/files/caf\xe9"
	s := newServer(t, b, nil, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", location)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"file_1"}`)
	})
	first := s.post(t, "acct_1", "k-bytes", `{"amount":1}`)
	wantAnswer(t, "first", first, 201, `{"id":"file_1"}`)
	again := s.post(t, "acct_1", "k-bytes", `{"amount":1}`)
	wantAnswer(t, "replay", again, 201, `{"id":"file_1"}`)
	if again.header.Get(idemserver.ReplayedHeader) != "true" || again.header.Get("Location") != location {
		t.Fatalf("replay: replayed %q, Location %q, want %q", again.header.Get(idemserver.ReplayedHeader), again.header.Get("Location"), location)
	}
}

func testKeyReuse(t *testing.T, b idemserver.Backend) {
	var events []idemserver.EventKind
	var mu sync.Mutex
	s := newServer(t, b, func(c *idemserver.Config) {
		c.OnEvent = func(e idemserver.Event) { mu.Lock(); events = append(events, e.Kind); mu.Unlock() }
	}, nil)
	wantAnswer(t, "first", s.post(t, "acct_1", "k-reuse", `{"amount":500}`), 201, `{"id":"ch_1","amount":500}`)
	a := s.post(t, "acct_1", "k-reuse", `{"amount":501}`)
	want := `{"type":"https://idemkit.dev/problems/idempotency-key-reused","title":"Idempotency-Key reused with another request","status":422,` +
		`"detail":"this key was used with a different method, route or body; use a new key for a new request","code":"idempotency_key_reused"}`
	wantAnswer(t, "reuse", a, 422, want)
	if p := problem(t, a); p.Type != idemserver.ProblemKeyReused || p.Code != idemserver.CodeKeyReused {
		t.Fatalf("problem %+v", p)
	}
	if n := s.execs.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2 || events[0] != idemserver.EventExecuted || events[1] != idemserver.EventPayloadConflict {
		t.Fatalf("events %v", events)
	}
	if st := s.mw.Stats(); st.PayloadConflicts != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func testCanonicalJSON(t *testing.T, b idemserver.Backend) {
	s := newServer(t, b, nil, nil)
	wantAnswer(t, "first", s.post(t, "acct_1", "k-json", `{"amount":7,"currency":"eur"}`), 201, `{"id":"ch_1","amount":7}`)
	a := s.post(t, "acct_1", "k-json", "{ \"currency\" : \"eur\",\n \"amount\": 7 }")
	wantAnswer(t, "reordered", a, 201, `{"id":"ch_1","amount":7}`)
	if a.header.Get(idemserver.ReplayedHeader) != "true" {
		t.Fatal("reordered JSON was not a replay")
	}
	wantAnswer(t, "other value", s.post(t, "acct_1", "k-json", `{"amount":7,"currency":"usd"}`), 422, s.post(t, "acct_1", "k-json", `{"amount":8}`).body)
	if n := s.execs.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}

func testKeyErrors(t *testing.T, b idemserver.Backend) {
	s := newServer(t, b, func(c *idemserver.Config) {
		c.Required = func(r *http.Request) bool { return r.URL.Query().Get("optional") == "" }
	}, nil)
	a := s.post(t, "acct_1", "", `{"amount":1}`)
	if a.status != 400 || problem(t, a).Type != idemserver.ProblemKeyMissing {
		t.Fatalf("missing key: %d %s", a.status, a.body)
	}
	for _, bad := range []string{`"unterminated`, `"a"b"`, "has space", strings.Repeat("k", 256), `""`, `"\x"`} {
		a := s.post(t, "acct_1", bad, `{"amount":1}`)
		if a.status != 400 || problem(t, a).Type != idemserver.ProblemKeyInvalid {
			t.Fatalf("key %q: %d %s", bad, a.status, a.body)
		}
	}
	a = s.post(t, "", "k-noauth", `{"amount":1}`)
	if a.status != 401 || problem(t, a).Type != idemserver.ProblemUnauthorized {
		t.Fatalf("no tenant: %d %s", a.status, a.body)
	}
	wantAnswer(t, "255-character key", s.post(t, "acct_1", strings.Repeat("k", 255), `{"amount":1}`), 201, `{"id":"ch_1","amount":1}`)
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/payments?optional=1", strings.NewReader(`{"amount":2}`))
	req.Header.Set("Authorization", "Bearer acct_1")
	wantAnswer(t, "not required", s.do(t, req), 201, `{"id":"ch_2","amount":2}`)
	if n := s.execs.Load(); n != 2 {
		t.Fatalf("executions = %d, want 2", n)
	}
}

func testPreExecution(t *testing.T, b idemserver.Backend) {
	s := newServer(t, b, nil, nil)
	a := s.post(t, "acct_1", "k-pre", `{"amount":0}`)
	wantAnswer(t, "invalid", a, 400, `{"error":"invalid_amount"}`)
	if a.header.Get(idemserver.ReplayedHeader) != "" {
		t.Fatal("validation answer marked replayed")
	}
	if st := s.status(t, "acct_1", "k-pre"); st.status != 404 || st.body != `{"status":"not_found"}` {
		t.Fatalf("status after validation failure: %d %s", st.status, st.body)
	}
	wantAnswer(t, "corrected", s.post(t, "acct_1", "k-pre", `{"amount":3}`), 201, `{"id":"ch_1","amount":3}`)
	if st := s.mw.Stats(); st.NotExecuted != 1 || st.Executed != 1 || st.PayloadConflicts != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func testExplicitBegin(t *testing.T, b idemserver.Backend) {
	var s *server
	s = newServer(t, b, func(c *idemserver.Config) { c.ExplicitBegin = true }, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("begin") == "1" {
			if err := idemserver.Begin(r); err != nil {
				t.Errorf("Begin: %v", err)
			}
			s.execs.Add(1)
		}
		w.WriteHeader(http.StatusAccepted)
		w.Write([]byte(r.URL.Query().Get("begin")))
	})
	post := func(q string) answer {
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/payments"+q, strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer acct_1")
		req.Header.Set("Idempotency-Key", "k-explicit")
		return s.do(t, req)
	}
	wantAnswer(t, "no begin", post("?begin=0"), 202, "0")
	wantAnswer(t, "no begin again", post("?begin=0"), 202, "0") // not stored: runs again
	wantAnswer(t, "begin", post("?begin=1"), 202, "1")
	a := post("?begin=1")
	wantAnswer(t, "replay", a, 202, "1")
	if a.header.Get(idemserver.ReplayedHeader) != "true" || s.execs.Load() != 1 {
		t.Fatalf("replay header %q, executions %d", a.header.Get(idemserver.ReplayedHeader), s.execs.Load())
	}
	if err := idemserver.Begin(httpRequest()); err != idemserver.ErrNoClaim {
		t.Fatalf("Begin outside the middleware = %v, want ErrNoClaim", err)
	}
}

func httpRequest() *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
	return r
}

// testPanic: a handler that panics after execution began must never run twice for its key.
// A backend whose claims roll the handler's work back (idemserver.RollbackClaim) frees the
// key: nothing was done. Any other keeps a 500 (ProblemHandlerFailed), replayed. A panic
// before execution began (ExplicitBegin, no Begin) frees the key with any backend.
func testPanic(t *testing.T, b idemserver.Backend) {
	for _, explicit := range []bool{false, true} {
		var calls int
		var mod func(*idemserver.Config)
		if explicit {
			mod = func(c *idemserver.Config) { c.ExplicitBegin = true }
		}
		s := newServer(t, b, mod, func(w http.ResponseWriter, r *http.Request) {
			calls++
			if calls == 1 {
				panic(http.ErrAbortHandler) // net/http closes the connection without logging
			}
			_ = idemserver.Begin(r)
			w.WriteHeader(201)
			w.Write([]byte("second"))
		})
		key := fmt.Sprintf("k-panic-%v", explicit)
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/payments", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer acct_1")
		req.Header.Set("Idempotency-Key", key)
		if resp, err := s.Client().Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("panicking handler answered %d", resp.StatusCode)
		}
		a := s.post(t, "acct_1", key, `{}`)
		if explicit || claimsRollBack(t, b) {
			wantAnswer(t, fmt.Sprintf("after panic (explicit begin %v)", explicit), a, 201, "second")
			continue
		}
		if a.status != 500 || problem(t, a).Type != idemserver.ProblemHandlerFailed || a.header.Get(idemserver.ReplayedHeader) != "true" || calls != 1 {
			t.Fatalf("after a panic past execution's start: %d %s replayed %q, %d executions; want the stored 500 %s, 1 execution",
				a.status, a.body, a.header.Get(idemserver.ReplayedHeader), calls, idemserver.ProblemHandlerFailed)
		}
	}
}

// claimsRollBack reports whether b's claims are idemserver.RollbackClaims that roll back.
func claimsRollBack(t *testing.T, b idemserver.Backend) bool {
	t.Helper()
	ctx := context.Background()
	c, _, err := b.Claim(ctx, idemserver.ClaimRequest{Scope: idemserver.Scope{Tenant: "probe", Operation: "probe", Key: "k-rollback"},
		Fingerprint: []byte("f"), Now: time.Now(), Lease: time.Minute})
	if err != nil || c == nil {
		t.Fatalf("claim: %v, %v", c, err)
	}
	defer c.Release(ctx)
	rc, ok := c.(idemserver.RollbackClaim)
	return ok && rc.RollsBack()
}

func testInProgress(t *testing.T, b idemserver.Backend) {
	s := newServer(t, b, func(c *idemserver.Config) { c.RetryAfter = 1500 * time.Millisecond }, nil)
	s.gate, s.entry = make(chan struct{}), make(chan struct{}, 1)
	done := make(chan answer)
	go func() { done <- s.post(t, "acct_1", "k-busy", `{"amount":9}`) }()
	<-s.entry
	a := s.post(t, "acct_1", "k-busy", `{"amount":9}`)
	if a.status != 409 || a.header.Get("Retry-After") != "2" || problem(t, a).Type != idemserver.ProblemInProgress {
		t.Fatalf("in progress: %d Retry-After %q %s", a.status, a.header.Get("Retry-After"), a.body)
	}
	if a := s.post(t, "acct_1", "k-busy", `{"amount":10}`); a.status != 422 && a.status != 409 {
		t.Fatalf("other body while in progress: %d %s", a.status, a.body)
	}
	close(s.gate)
	wantAnswer(t, "first", <-done, 201, `{"id":"ch_1","amount":9}`)
	if a := s.post(t, "acct_1", "k-busy", `{"amount":10}`); a.status != 422 {
		t.Fatalf("other body once stored: %d %s", a.status, a.body)
	}
	if st := s.mw.Stats(); st.Concurrent < 1 || st.Executed != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func testStatus(t *testing.T, b idemserver.Backend) {
	s := newServer(t, b, nil, nil)
	wantAnswer(t, "unknown key", s.status(t, "acct_1", "k-st"), 404, `{"status":"not_found"}`)
	s.gate, s.entry = make(chan struct{}), make(chan struct{}, 1)
	done := make(chan answer)
	go func() { done <- s.post(t, "acct_1", "k-st", `{"amount":4}`) }()
	<-s.entry
	a := s.status(t, "acct_1", "k-st")
	wantAnswer(t, "processing", a, 202, `{"status":"processing"}`)
	if a.header.Get("Retry-After") != "1" {
		t.Fatalf("processing Retry-After %q", a.header.Get("Retry-After"))
	}
	close(s.gate)
	<-done
	wantAnswer(t, "completed", s.status(t, "acct_1", "k-st"), 200,
		`{"status":"completed","response_status":201,"response_body":{"id":"ch_1","amount":4}}`)
	wantAnswer(t, "sf-string key", s.status(t, "acct_1", `%22k-st%22`), 200,
		`{"status":"completed","response_status":201,"response_body":{"id":"ch_1","amount":4}}`)
	wantAnswer(t, "other tenant", s.status(t, "acct_2", "k-st"), 404, `{"status":"not_found"}`)
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/v1/payments/operations/k-st", nil)
	if a := s.do(t, req); a.status != 401 {
		t.Fatalf("status without credentials: %d %s", a.status, a.body)
	}
}

func testTenantIsolation(t *testing.T, b idemserver.Backend) {
	s := newServer(t, b, nil, nil)
	wantAnswer(t, "tenant 1", s.post(t, "acct_1", "shared", `{"amount":1}`), 201, `{"id":"ch_1","amount":1}`)
	wantAnswer(t, "tenant 2", s.post(t, "acct_2", "shared", `{"amount":2}`), 201, `{"id":"ch_2","amount":2}`)
	wantAnswer(t, "tenant 1 replay", s.post(t, "acct_1", "shared", `{"amount":1}`), 201, `{"id":"ch_1","amount":1}`)
	wantAnswer(t, "tenant 2 replay", s.post(t, "acct_2", "shared", `{"amount":2}`), 201, `{"id":"ch_2","amount":2}`)
	if n := s.execs.Load(); n != 2 {
		t.Fatalf("executions = %d, want 2", n)
	}
}

func testRetention(t *testing.T, b idemserver.Backend) {
	s := newServer(t, b, nil, nil) // DefaultRetention
	wantAnswer(t, "first", s.post(t, "acct_1", "k-ret", `{"amount":1}`), 201, `{"id":"ch_1","amount":1}`)
	s.clock.Advance(idemserver.DefaultRetention - time.Second)
	wantAnswer(t, "inside retention", s.post(t, "acct_1", "k-ret", `{"amount":1}`), 201, `{"id":"ch_1","amount":1}`)
	s.clock.Advance(time.Second)
	wantAnswer(t, "status after retention", s.status(t, "acct_1", "k-ret"), 404, `{"status":"not_found"}`)
	wantAnswer(t, "after retention", s.post(t, "acct_1", "k-ret", `{"amount":1}`), 201, `{"id":"ch_2","amount":1}`)
	wantAnswer(t, "other key", s.post(t, "acct_1", "k-ret2", `{"amount":1}`), 201, `{"id":"ch_3","amount":1}`)
	s.clock.Advance(idemserver.DefaultRetention)
	n, err := s.mw.Purge(t.Context(), 1)
	if err != nil || n != 2 {
		t.Fatalf("Purge = %d, %v; want 2", n, err)
	}
	if st := s.mw.Stats(); st.ExpiredReuse != 1 || st.Purged != 2 || st.Executed != 3 || st.Replays != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func testConcurrent100(t *testing.T, b idemserver.Backend) {
	s := newServer(t, b, nil, nil)
	answers := postMany(t, s, 100)
	var created, conflicts int
	for _, a := range answers {
		switch {
		case a.status == 201 && a.body == `{"id":"ch_1","amount":42}`:
			created++
		case a.status == 409:
			conflicts++
		default:
			t.Fatalf("answer %d %s", a.status, a.body)
		}
	}
	if s.execs.Load() != 1 || created < 1 || created+conflicts != 100 {
		t.Fatalf("executions %d, 201s %d, 409s %d", s.execs.Load(), created, conflicts)
	}
	if st := s.mw.Stats(); st.Executed != 1 || st.Concurrent != int64(conflicts) || st.Replays != int64(created-1) {
		t.Fatalf("stats %+v with %d created, %d conflicts", st, created, conflicts)
	}
}

func testConcurrent100Wait(t *testing.T, b idemserver.Backend) {
	s := newServer(t, b, func(c *idemserver.Config) { c.Wait = time.Hour; c.WaitPoll = 5 * time.Millisecond }, nil)
	s.gate = make(chan struct{})
	time.AfterFunc(50*time.Millisecond, func() { close(s.gate) }) // let the others pile up
	for _, a := range postMany(t, s, 100) {
		wantAnswer(t, "waited", a, 201, `{"id":"ch_1","amount":42}`)
	}
	if st := s.mw.Stats(); s.execs.Load() != 1 || st.Executed != 1 || st.Replays != 99 || st.InProgressTimeouts != 0 {
		t.Fatalf("executions %d, stats %+v", s.execs.Load(), st)
	}
}

func postMany(t *testing.T, s *server, n int) []answer {
	answers := make([]answer, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range answers {
		wg.Go(func() {
			<-start
			answers[i] = s.post(t, "acct_1", "k-100", `{"amount":42}`)
		})
	}
	close(start)
	wg.Wait()
	return answers
}

func testWaitTimeout(t *testing.T, b idemserver.Backend) {
	var s *server
	var sleeps int
	s = newServer(t, b, func(c *idemserver.Config) {
		c.Wait, c.WaitPoll = 2*time.Second, 500*time.Millisecond
		c.Sleep = func(ctx context.Context, d time.Duration) error { // the injected clock moves instead
			sleeps++
			s.clock.Advance(d)
			return ctx.Err()
		}
	}, nil)
	s.gate, s.entry = make(chan struct{}), make(chan struct{}, 1)
	done := make(chan answer)
	go func() { done <- s.post(t, "acct_1", "k-wait", `{"amount":5}`) }()
	<-s.entry
	a := s.post(t, "acct_1", "k-wait", `{"amount":5}`)
	if a.status != 409 || a.header.Get("Retry-After") != "1" || sleeps != 4 {
		t.Fatalf("after waiting: %d Retry-After %q, %d sleeps (want 409, 1, 4)", a.status, a.header.Get("Retry-After"), sleeps)
	}
	close(s.gate)
	wantAnswer(t, "first", <-done, 201, `{"id":"ch_1","amount":5}`)
	if st := s.mw.Stats(); st.Concurrent != 1 || st.InProgressTimeouts != 1 || st.Executed != 1 {
		t.Fatalf("stats %+v", st)
	}
}
