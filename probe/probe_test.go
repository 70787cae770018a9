package probe_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/outcome"
	"github.com/idemkit/idem/probe"
)

// want builds the expected verdicts: every check Honoured unless listed.
func want(broken, notObserved []string) map[string]probe.Result {
	out := map[string]probe.Result{}
	for _, c := range probe.Checks {
		out[c] = probe.Honoured
	}
	for _, c := range broken {
		out[c] = probe.Broken
	}
	for _, c := range notObserved {
		out[c] = probe.NotObserved
	}
	return out
}

func check(t *testing.T, rep *probe.Report, wantV map[string]probe.Result) {
	t.Helper()
	if len(rep.Rows) != len(probe.Checks) {
		t.Fatalf("%d rows, want %d", len(rep.Rows), len(probe.Checks))
	}
	for i, r := range rep.Rows {
		if r.Check != probe.Checks[i] || r.Rule == "" || r.Evidence == "" {
			t.Errorf("row %d = %+v", i, r)
		}
		if r.Result != wantV[r.Check] {
			t.Errorf("%s = %s (%s), want %s", r.Check, r.Result, r.Evidence, wantV[r.Check])
		}
	}
}

// noWait is Config.Sleep for tests: the pauses between transient answers take no time.
func noWait(ctx context.Context, _ time.Duration) error { return ctx.Err() }

func run(t *testing.T, base string, mod func(*probe.Config)) *probe.Report {
	t.Helper()
	cfg := probe.Config{BaseURL: base, Sandbox: true, Sleep: noWait}
	if mod != nil {
		mod(&cfg)
	}
	rep, err := probe.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// safeIdemtest is idemtest (idemserver's middleware) with the faults a correct API shows:
// create, replay and key reuse are served at once; every request of the first burst is
// slow, so that the in-progress check sees 409s (a fault is taken on arrival, before the
// middleware claims the key, so the first to arrive need not be the claimer); then a 5xx
// after a commit on 25% of the payments (stored and replayed, or the 201 stored and the
// wire given a 500), which the stored-5xx row needs to be observed.
func safeIdemtest(t *testing.T, seed int64) *idemtest.Server {
	t.Helper()
	api := idemtest.NewServer(idemtest.Config{SlowDelay: 300 * time.Millisecond, FaultRate: 0.25, Seed: seed,
		Faults: []idemtest.Fault{idemtest.FaultStored500AfterCharge, idemtest.Fault500AfterCommit, idemtest.FaultStored500}})
	t.Cleanup(api.Close)
	api.Script(idemtest.FaultNone, idemtest.FaultNone, idemtest.FaultNone)
	api.Script(slices.Repeat([]idemtest.Fault{idemtest.FaultSlow}, probe.DefaultConcurrency)...)
	return api
}

// Against idemtest honouring the contract, with 5xx after commits, every safety row is
// honoured and the verdict is safe; the charges reported are the server's ledger.
func TestIdemtestIsSafe(t *testing.T) {
	for _, seed := range []int64{1, 2} {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			t.Parallel()
			api := safeIdemtest(t, seed)
			rep := run(t, api.URL, func(c *probe.Config) { c.Header = http.Header{"Authorization": {"Bearer sk_sandbox"}} })
			check(t, rep, want(nil, []string{probe.CheckRetention}))
			if rep.Verdict != probe.VerdictSafe || !rep.Suggestion.Safe || len(rep.Broken()) != 0 {
				t.Errorf("verdict %s, safe %v, broken %v", rep.Verdict, rep.Suggestion.Safe, rep.Broken())
			}
			ex := api.Executions()
			for _, e := range ex {
				if n := api.ExecutionsByReference(e.Reference); n != 1 {
					t.Errorf("reference %s executed %d times", e.Reference, n)
				}
				if e.Tenant != "Bearer sk_sandbox" {
					t.Errorf("tenant %q", e.Tenant)
				}
			}
			if rep.Charges.Found != len(ex) || rep.Charges.Keys < len(ex) {
				t.Errorf("charges %+v, ledger %d", rep.Charges, len(ex))
			}
			if rep.Power.Trials != probe.DefaultTrials || rep.Power.Probability < probe.DesignPower {
				t.Errorf("power %+v", rep.Power)
			}
			if rep.Dialect.Profile != "idem" {
				t.Errorf("dialect %+v, want idem", rep.Dialect)
			}
			s := rep.Suggestion
			if s.BaseURL != api.URL || s.KeyHeader != "Idempotency-Key" || s.KeyStatusURL != "/v1/payments/operations/{key}" ||
				s.LookupPath != "/v1/payments?reference={reference}" || len(s.KeyConflictCodes) != 0 || s.Profile != "idem" {
				t.Errorf("suggestion = %+v", s)
			}
			if seed != 1 {
				return
			}
			// The suggested configuration works: a payment through idem's client, once.
			cfg, err := s.Config()
			if err != nil {
				t.Fatal(err)
			}
			cfg.Sleep = func(context.Context, time.Duration) error { return nil }
			c, err := idem.NewClient(cfg)
			if err != nil {
				t.Fatal(err)
			}
			api.Script(idemtest.FaultDropAfterCommit)
			res, err := c.Do(context.Background(), idem.NewOperation(http.MethodPost, "/v1/payments",
				[]byte(`{"amount":5,"currency":"EUR","customer":"c","reference":"after-probe"}`)))
			if err != nil || res.StatusCode != http.StatusCreated {
				t.Fatalf("Do = %+v, %v", res, err)
			}
			if n := api.ExecutionsByReference("after-probe"); n != 1 {
				t.Errorf("after-probe executed %d times", n)
			}
		})
	}
}

// text is the report's table, for failure messages.
func text(rep *probe.Report) string {
	var b strings.Builder
	_ = rep.WriteText(&b, 160)
	return b.String()
}

// Retry-After in both RFC 9110 forms is honoured, and the throttled request is resent with
// the same key after it.
func TestRetryAfterForms(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, v := range []string{"0", now.Format(http.TimeFormat)} {
		f := &fake{throttleOnce: v}
		srv := f.start(t)
		rep := run(t, srv.URL, func(c *probe.Config) { c.Now = func() time.Time { return now } })
		row, _ := rep.Row(probe.CheckRetryAfter)
		if row.Result != probe.Honoured || !strings.Contains(row.Evidence, "429: ") {
			t.Errorf("Retry-After %q: %+v", v, row)
		}
		if c, _ := rep.Row(probe.CheckCreate); c.Result != probe.Honoured {
			t.Errorf("create after a 429: %+v", c)
		}
	}
	f := &fake{throttleOnce: "soon"}
	rep := run(t, f.start(t).URL, nil)
	if r, _ := rep.Row(probe.CheckRetryAfter); r.Result != probe.Broken {
		t.Errorf("Retry-After soon: %+v", r)
	}
}

// A key-reuse 422 whose code idem does not recognise is honoured, and the suggested
// configuration classifies it as a key conflict.
func TestKeyConflictCodeSuggested(t *testing.T) {
	f := &fake{conflictCode: "key_in_use"}
	rep := run(t, f.start(t).URL, nil)
	if r, _ := rep.Row(probe.CheckKeyReuse); r.Result != probe.Honoured {
		t.Fatalf("key-reuse %+v", r)
	}
	s := rep.Suggestion
	if len(s.KeyConflictCodes) != 1 || s.KeyConflictCodes[0] != "key_in_use" {
		t.Fatalf("KeyConflictCodes = %q", s.KeyConflictCodes)
	}
	cfg, err := s.Config()
	if err != nil {
		t.Fatal(err)
	}
	a := &outcome.Attempt{Response: &http.Response{StatusCode: 422}, Body: []byte(`{"code":"key_in_use"}`)}
	if got := cfg.Classifiers.Classify(a); got != outcome.ClassKeyConflict {
		t.Errorf("suggested classifiers give %v, want ClassKeyConflict", got)
	}
}

// Stripe answers key reuse with 400 and error type idempotency_error: the client reads it as
// ErrKeyConflict, so the probe grades it honoured, not broken.
func TestStripeKeyReuseHonoured(t *testing.T) {
	f := &fake{stripeReuse: true}
	rep := run(t, f.start(t).URL, nil)
	if r, _ := rep.Row(probe.CheckKeyReuse); r.Result != probe.Honoured {
		t.Fatalf("key-reuse %+v", r)
	}
	if len(rep.Suggestion.KeyConflictCodes) != 0 {
		t.Errorf("KeyConflictCodes = %q, want none (idem recognises idempotency_error)", rep.Suggestion.KeyConflictCodes)
	}
}

// Without Sandbox nothing is sent.
func TestRefusesWithoutSandbox(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	_, err := probe.Run(context.Background(), probe.Config{BaseURL: srv.URL})
	if !errors.Is(err, probe.ErrNotSandbox) {
		t.Errorf("Run = %v, want ErrNotSandbox", err)
	}
	if hits.Load() != 0 {
		t.Errorf("%d requests sent without Sandbox", hits.Load())
	}
}

func TestInvalidConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  probe.Config
		name string
	}{
		{probe.Config{BaseURL: "example.com"}, "BaseURL"},
		{probe.Config{BaseURL: "ftp://x"}, "BaseURL"},
		{probe.Config{BaseURL: "http://x", Path: "v1"}, "Path"},
		{probe.Config{BaseURL: "http://x", KeyStatusPath: "/status"}, "KeyStatusPath"},
		{probe.Config{BaseURL: "http://x", SearchPath: "/search"}, "SearchPath"},
		{probe.Config{BaseURL: "http://x", Concurrency: -1}, "Concurrency"},
		{probe.Config{BaseURL: "http://x", Rounds: -1}, "Rounds"},
		{probe.Config{BaseURL: "http://x", Trials: -1}, "Trials"},
		{probe.Config{BaseURL: "http://x", Retention: -time.Second}, "Retention"},
	} {
		tc.cfg.Sandbox = true
		_, err := probe.Run(context.Background(), tc.cfg)
		if !errors.Is(err, probe.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%+v: %v, want ErrInvalidConfig naming %s", tc.cfg, err, tc.name)
		}
	}
}

// An API that cannot be reached at all (refused, DNS failure: nothing was sent) is neither a
// report nor a broken row: Run returns ErrUnreachable after a bounded number of tries, naming
// the target and the last transport error. Each check sends at most 5 requests: the status
// query for an unknown key and the create, 10 in all.
func TestUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, "connection refused"},
		{"dns", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "api.invalid", IsNotFound: true}}, "no such host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent atomic.Int32
			client := &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
				sent.Add(1)
				return nil, tc.err
			})}
			var pauses []time.Duration // Run is sequential here: no lock needed
			pause := func(ctx context.Context, d time.Duration) error { pauses = append(pauses, d); return ctx.Err() }
			rep, err := probe.Run(context.Background(), probe.Config{BaseURL: "http://api.invalid", Sandbox: true, HTTPClient: client, Sleep: pause})
			if !errors.Is(err, probe.ErrUnreachable) || rep != nil {
				t.Fatalf("Run = %v, %v; want ErrUnreachable", rep, err)
			}
			for _, s := range []string{"http://api.invalid", tc.want, "10 requests"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if n := sent.Load(); n != 10 {
				t.Errorf("%d requests sent, want 10", n)
			}
			// Two checks of 5 tries each, 200 ms (no Retry-After) between tries.
			if len(pauses) != 8 || slices.ContainsFunc(pauses, func(d time.Duration) bool { return d != 200*time.Millisecond }) {
				t.Errorf("pauses %v, want 8 of 200ms", pauses)
			}
		})
	}
	// A real closed port, as idemctl meets it.
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	if _, err := probe.Run(context.Background(), probe.Config{BaseURL: url, Sandbox: true, Sleep: noWait}); !errors.Is(err, probe.ErrUnreachable) {
		t.Errorf("closed port: %v, want ErrUnreachable", err)
	}
}

// A refused connection before any answer is transient: an API that answers the status
// query but refuses every POST leaves create NotObserved (not Broken) with the refusals met,
// after 5 tries, and Run reports no error since the API answered.
func TestRefusedCreateIsNotBroken(t *testing.T) {
	api := idemtest.NewServer(idemtest.Config{})
	defer api.Close()
	var posts atomic.Int32
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method == http.MethodPost {
			posts.Add(1)
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}
		return http.DefaultTransport.RoundTrip(r)
	})}
	rep := run(t, api.URL, func(c *probe.Config) { c.HTTPClient = client })
	r, _ := rep.Row(probe.CheckCreate)
	if r.Result != probe.NotObserved || !strings.Contains(r.Evidence, "transport error x5") {
		t.Errorf("create = %s (%s), want not observed after 5 transport errors", r.Result, r.Evidence)
	}
	if n := posts.Load(); n != 5 {
		t.Errorf("%d POSTs, want 5", n)
	}
	if b := rep.Broken(); len(b) != 0 {
		t.Errorf("Broken() = %v", b)
	}
}

// Connections refused in the middle of an in-progress burst say nothing about the contract:
// the row is not Broken. Every other POST of the bursts is refused.
func TestRefusedInBurstIsNotBroken(t *testing.T) {
	api := idemtest.NewServer(idemtest.Config{})
	defer api.Close()
	var posts atomic.Int32
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		// create, replay and key reuse are POSTs 1 to 3; the bursts follow.
		if r.Method != http.MethodPost {
			return http.DefaultTransport.RoundTrip(r)
		}
		if n := posts.Add(1); n > 3 && n%2 == 0 {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}
		return http.DefaultTransport.RoundTrip(r)
	})}
	rep := run(t, api.URL, func(c *probe.Config) { c.HTTPClient = client })
	r, _ := rep.Row(probe.CheckInProgress)
	if r.Result == probe.Broken || !strings.Contains(r.Evidence, "transport error x") {
		t.Errorf("in-progress = %s (%s), want not broken, refusals tallied", r.Result, r.Evidence)
	}
	if b := rep.Broken(); len(b) != 0 {
		t.Errorf("Broken() = %v", b)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// An API that refuses the probe's credentials breaks no rule: the rows say so and how to pass
// them, where a 401 graded the create Broken and the status endpoint "not in the default
// convention" (newcomer run).
func TestUnauthorizedIsNotBroken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer srv.Close()
	rep, err := probe.Run(context.Background(), probe.Config{BaseURL: srv.URL, Sandbox: true})
	if err != nil {
		t.Fatal(err)
	}
	if b := rep.Broken(); len(b) != 0 || !rep.Unauthorized {
		t.Fatalf("broken rows %v, unauthorized %v", b, rep.Unauthorized)
	}
	for _, c := range []string{probe.CheckCreate, probe.CheckKeyStatusNotFound} {
		if row, _ := rep.Row(c); row.Result != probe.NotObserved || !strings.Contains(row.Evidence, "refused the probe's credentials") {
			t.Errorf("%s: %+v", c, row)
		}
	}
	if n := rep.Suggestion.Notes; len(n) == 0 || !strings.Contains(n[0], "refused the probe's credentials") {
		t.Errorf("notes %q", n)
	}
}
