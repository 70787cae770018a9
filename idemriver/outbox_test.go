package idemriver_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemriver"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

var finished = []river.EventKind{river.EventKindJobCompleted, river.EventKindJobCancelled, river.EventKindJobFailed}

// An order whose transaction rolls back leaves no payment job and no charge; one that
// commits is charged once, under the key minted at insert, which every attempt carries.
func TestOutboxCommitOrRollback(t *testing.T) {
	t.Parallel() // each test has its own schema, API and River clients
	pool, _ := schemaDSN(t)
	api := idemtest.NewServer(idemtest.Config{})
	t.Cleanup(api.Close)
	c, _ := idemClient(t, pool, api.URL, "w1", nil)
	rc := riverClient(t, pool, &idemriver.Worker{Client: c}, nil)
	events, stop := rc.Subscribe(finished...)
	defer stop()
	start(t, rc)

	rolledBack := payment(t, "order-rb", 1250)
	placeOrder(t, pool, rc, rolledBack, 1250, false)
	var jobs, orders int
	if err := pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM river_job), (SELECT count(*) FROM orders)`).Scan(&jobs, &orders); err != nil {
		t.Fatal(err)
	}
	if jobs != 0 || orders != 0 {
		t.Fatalf("after a rollback: %d jobs, %d orders; want none", jobs, orders)
	}

	args := payment(t, "order-1", 1250)
	api.Script(idemtest.FaultDropAfterCommit) // executed, the answer lost: idem asks, never resends
	id := placeOrder(t, pool, rc, args, 1250, true)
	if ev := waitEvent(t, events, id, finished...); ev.Kind != river.EventKindJobCompleted {
		t.Fatalf("job ended %s, want completed", ev.Kind)
	}
	if n := api.ExecutionsByReference("order-1"); n != 1 {
		t.Errorf("charges for order-1: %d, want 1", n)
	}
	if n := api.ExecutionsByReference("order-rb"); n != 0 {
		t.Errorf("charges for the rolled-back order: %d, want 0", n)
	}
	if n := api.AttemptsFor(args.Key); n != 1 || api.KeyStatusChecks() != 1 {
		t.Errorf("POSTs under the job's key %d, status checks %d; want 1 and 1", n, api.KeyStatusChecks())
	}
}

// Every fault around the send ends in one charge per order, the job completed.
func TestOutboxFaultsAroundTheSend(t *testing.T) {
	t.Parallel() // each test has its own schema, API and River clients
	pool, _ := schemaDSN(t)
	api := idemtest.NewServer(idemtest.Config{RetryAfter: -1})
	t.Cleanup(api.Close)
	c, _ := idemClient(t, pool, api.URL, "w1", nil)
	rc := riverClient(t, pool, &idemriver.Worker{Client: c, PendingWait: 10 * time.Millisecond}, nil)
	events, stop := rc.Subscribe(finished...)
	defer stop()
	start(t, rc)
	for _, f := range []idemtest.Fault{idemtest.FaultDropAfterCommit, idemtest.Fault500AfterCommit,
		idemtest.FaultResetBeforeProcessing, idemtest.Fault502BeforeProcessing, idemtest.Fault503} {
		t.Run(f.String(), func(t *testing.T) {
			ref := "order-" + f.String()
			api.Script(f)
			id := placeOrder(t, pool, rc, payment(t, ref, 700), 700, true)
			if ev := waitEvent(t, events, id, finished...); ev.Kind != river.EventKindJobCompleted {
				t.Fatalf("job ended %s, want completed", ev.Kind)
			}
			if n := api.ExecutionsByReference(ref); n != 1 {
				t.Errorf("charges: %d, want 1", n)
			}
		})
	}
}

// The server executed and answered, but the job did not complete (the application's
// OnSuccess failed, as a worker dying after the send would leave it): River retries the
// job, and the retry gets the answer from the keystore without sending.
func TestOutboxFailureAfterTheSendNeverResends(t *testing.T) {
	t.Parallel() // each test has its own schema, API and River clients
	pool, _ := schemaDSN(t)
	api := idemtest.NewServer(idemtest.Config{})
	t.Cleanup(api.Close)
	c, _ := idemClient(t, pool, api.URL, "w1", nil)
	var calls atomic.Int64
	var mu sync.Mutex
	var sources []outcome.Source
	var keys []string // the key of each run's operation (through Worker.Send)
	w := &idemriver.Worker{Client: c, Send: func(ctx context.Context, op *idem.Operation) (*idem.Result, error) {
		mu.Lock()
		keys = append(keys, op.Key())
		mu.Unlock()
		return c.Do(ctx, op)
	}, OnSuccess: func(_ context.Context, _ *river.Job[idemriver.PaymentArgs], res *idem.Result) error {
		mu.Lock()
		sources = append(sources, res.Source)
		mu.Unlock()
		if calls.Add(1) == 1 {
			return errors.New("order table unavailable")
		}
		return nil
	}}
	rc := riverClient(t, pool, w, nil)
	events, stop := rc.Subscribe(finished...)
	defer stop()
	start(t, rc)
	args := payment(t, "order-after", 900)
	id := placeOrder(t, pool, rc, args, 900, true)
	if ev := waitEvent(t, events, id, river.EventKindJobCompleted); ev.Job.Attempt != 2 {
		t.Errorf("completed at attempt %d, want 2", ev.Job.Attempt)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sources) != 2 || sources[0] != outcome.SourceResponse || sources[1] != outcome.SourceStore {
		t.Errorf("answers %v, want [response store]", sources)
	}
	if len(keys) != 2 || keys[0] != args.Key || keys[1] != args.Key {
		t.Errorf("keys of the runs %v, want the job's %s twice", keys, args.Key)
	}
	if n := api.AttemptsFor(args.Key); n != 1 || api.ExecutionsByReference("order-after") != 1 {
		t.Errorf("POSTs %d, charges %d; want 1 and 1", n, api.ExecutionsByReference("order-after"))
	}
}

// The worker's context dies around the send (River's shutdown, a cancelled run): before the
// server executes, and after it executed but before the answer came back. The job is
// snoozed, not failed; the next run asks the status endpoint before resending, and the
// order is charged once.
func TestOutboxWorkerContextKilledAroundTheSend(t *testing.T) {
	t.Parallel() // each test has its own schema, API and River clients
	for _, after := range []bool{false, true} {
		name := map[bool]string{false: "before-execution", true: "after-execution"}[after]
		t.Run(name, func(t *testing.T) {
			pool, _ := schemaDSN(t)
			inner := idemtest.NewHandler(idemtest.Config{})
			kw := &killableWorker{}
			var killed atomic.Bool
			srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost || killed.Swap(true) {
					inner.ServeHTTP(w, r)
					return
				}
				if after {
					inner.ServeHTTP(httptest.NewRecorder(), r) // executed and stored
				}
				kw.kill() // the worker dies before the server executes, or before the answer reaches it
				// No answer at all (an empty 200 would be a success to the client): the
				// connection is closed.
				panic(http.ErrAbortHandler)
			}))
			t.Cleanup(inner.Close)
			c, _ := idemClient(t, pool, srv.URL, "w1", nil)
			kw.Worker = &idemriver.Worker{Client: c}
			rc := riverClient(t, pool, kw, nil)
			events, stop := rc.Subscribe(append([]river.EventKind{river.EventKindJobSnoozed}, finished...)...)
			defer stop()
			start(t, rc)
			args := payment(t, "order-"+name, 1100)
			id := placeOrder(t, pool, rc, args, 1100, true)
			if ev := waitEvent(t, events, id, append([]river.EventKind{river.EventKindJobSnoozed}, finished...)...); ev.Kind != river.EventKindJobSnoozed {
				t.Fatalf("the killed run ended %s, want snoozed", ev.Kind)
			}
			if ev := waitEvent(t, events, id, finished...); ev.Kind != river.EventKindJobCompleted {
				t.Fatalf("job ended %s, want completed", ev.Kind)
			}
			if n := inner.ExecutionsByReference(args.Reference); n != 1 {
				t.Errorf("charges: %d, want 1", n)
			}
			if inner.KeyStatusChecks() < 1 {
				t.Error("the next run did not ask the status endpoint")
			}
			// Before execution only the resend reached the API; after it, the status check
			// found the charge and nothing was resent.
			if n := inner.AttemptsFor(args.Key); n != 1 {
				t.Errorf("POSTs the API handled under the key: %d, want 1", n)
			}
		})
	}
}

// A Retry-After longer than idem's cap is River's schedule: the job is snoozed for exactly
// the server's wait (not counted as an attempt), then resent under the same key.
func TestOutboxRetryAfterSnoozesTheJob(t *testing.T) {
	t.Parallel() // each test has its own schema, API and River clients
	pool, _ := schemaDSN(t)
	api := idemtest.NewServer(idemtest.Config{RetryAfter: 120})
	t.Cleanup(api.Close)
	api.Script(idemtest.Fault429)
	c, _ := idemClient(t, pool, api.URL, "w1", nil)
	rc := riverClient(t, pool, &idemriver.Worker{Client: c}, nil)
	events, stop := rc.Subscribe(append([]river.EventKind{river.EventKindJobSnoozed}, finished...)...)
	defer stop()
	start(t, rc)
	args := payment(t, "order-ra", 500)
	before := time.Now()
	id := placeOrder(t, pool, rc, args, 500, true)
	ev := waitEvent(t, events, id, append([]river.EventKind{river.EventKindJobSnoozed}, finished...)...)
	if ev.Kind != river.EventKindJobSnoozed {
		t.Fatalf("job %s, want snoozed", ev.Kind)
	}
	row := jobRow(t, rc, id)
	if wait := row.ScheduledAt.Sub(before); row.State != rivertype.JobStateScheduled || wait < 119*time.Second || wait > 125*time.Second {
		t.Fatalf("state %s, scheduled in %s; want scheduled in 120 s", row.State, wait)
	}
	// River counts the run at fetch and gives it back on a snooze: as many attempts left as
	// before the run.
	if left := row.MaxAttempts - row.Attempt; left != river.MaxAttemptsDefault || api.AttemptsFor(args.Key) != 1 {
		t.Fatalf("attempt %d of %d (%d left, want %d), POSTs %d, want 1", row.Attempt, row.MaxAttempts, left, river.MaxAttemptsDefault, api.AttemptsFor(args.Key))
	}
	if _, err := rc.JobRetry(context.Background(), id); err != nil { // the wait is over, as far as the test goes
		t.Fatal(err)
	}
	if ev := waitEvent(t, events, id, finished...); ev.Kind != river.EventKindJobCompleted {
		t.Fatalf("job ended %s, want completed", ev.Kind)
	}
	if api.AttemptsFor(args.Key) != 2 || api.ExecutionsByReference("order-ra") != 1 {
		t.Errorf("POSTs %d, charges %d; want 2 and 1", api.AttemptsFor(args.Key), api.ExecutionsByReference("order-ra"))
	}
}

// A permanent refusal (a 400) cancels the job at once: never resent, OnFailed told.
func TestOutboxPermanentRefusalCancels(t *testing.T) {
	t.Parallel() // each test has its own schema, API and River clients
	pool, _ := schemaDSN(t)
	api := idemtest.NewServer(idemtest.Config{})
	t.Cleanup(api.Close)
	c, _ := idemClient(t, pool, api.URL, "w1", nil)
	var failed atomic.Value
	rc := riverClient(t, pool, &idemriver.Worker{Client: c, OnFailed: func(_ context.Context, _ *river.Job[idemriver.PaymentArgs], err error) {
		failed.Store(err)
	}}, nil)
	events, stop := rc.Subscribe(finished...)
	defer stop()
	start(t, rc)
	args := payment(t, "order-bad", 0)
	id := placeOrder(t, pool, rc, args, 0, true)
	if ev := waitEvent(t, events, id, finished...); ev.Kind != river.EventKindJobCancelled {
		t.Fatalf("job ended %s, want cancelled", ev.Kind)
	}
	if err, _ := failed.Load().(error); !errors.Is(err, idem.ErrPermanent) {
		t.Errorf("OnFailed got %v, want ErrPermanent", err)
	}
	if api.AttemptsFor(args.Key) != 1 || api.ExecutionsByReference("order-bad") != 0 {
		t.Errorf("POSTs %d, charges %d; want 1 and 0", api.AttemptsFor(args.Key), api.ExecutionsByReference("order-bad"))
	}
}

// A stored 5xx holds the job (snoozed, never resent) with the record manual in pgstore,
// where an operator sees it (idemctl lists manual records); Client.Resolve settles it and the
// job's next run completes (executed) or cancels (not executed) without sending.
func TestOutboxStoredServerErrorWaitsForResolve(t *testing.T) {
	t.Parallel() // each test has its own schema, API and River clients
	for _, tc := range []struct {
		fault   idemtest.Fault
		verdict idem.Verdict
		want    river.EventKind
		charges int
	}{
		{idemtest.FaultStored500AfterCharge, idem.VerdictExecuted, river.EventKindJobCompleted, 1},
		{idemtest.FaultStored500, idem.VerdictNotExecuted, river.EventKindJobCancelled, 0},
	} {
		t.Run(tc.fault.String(), func(t *testing.T) {
			pool, _ := schemaDSN(t)
			api := idemtest.NewServer(idemtest.Config{})
			t.Cleanup(api.Close)
			api.Script(tc.fault)
			c, store := idemClient(t, pool, api.URL, "w1", nil)
			rc := riverClient(t, pool, &idemriver.Worker{Client: c, ManualWait: time.Hour}, nil)
			events, stop := rc.Subscribe(append([]river.EventKind{river.EventKindJobSnoozed}, finished...)...)
			defer stop()
			start(t, rc)
			args := payment(t, "order-"+tc.fault.String(), 1500)
			id := placeOrder(t, pool, rc, args, 1500, true)
			if ev := waitEvent(t, events, id, append([]river.EventKind{river.EventKindJobSnoozed}, finished...)...); ev.Kind != river.EventKindJobSnoozed {
				t.Fatalf("job %s, want snoozed", ev.Kind)
			}
			rec, err := store.Get(context.Background(), "", args.Key)
			if err != nil || rec.State != keystore.StateManual || rec.LastStatusCode != 500 || rec.Intent != args.Reference {
				t.Fatalf("record %+v, %v; want manual with the stored 500", rec, err)
			}
			if row := jobRow(t, rc, id); row.State != rivertype.JobStateScheduled {
				t.Fatalf("job state %s, want scheduled (held, not discarded)", row.State)
			}
			var resp *keystore.Response
			if tc.verdict == idem.VerdictExecuted {
				resp = &keystore.Response{StatusCode: 201, Body: []byte(`{"id":"pay_found"}`)}
			}
			if _, err := c.Resolve(context.Background(), "", args.Key, idem.Resolution{Verdict: tc.verdict, Response: resp, Note: "ops: checked the dashboard"}); err != nil {
				t.Fatal(err)
			}
			if _, err := rc.JobRetry(context.Background(), id); err != nil {
				t.Fatal(err)
			}
			if ev := waitEvent(t, events, id, finished...); ev.Kind != tc.want {
				t.Fatalf("job ended %s, want %s", ev.Kind, tc.want)
			}
			if api.AttemptsFor(args.Key) != 1 || api.ExecutionsByReference(args.Reference) != tc.charges {
				t.Errorf("POSTs %d, charges %d; want 1 and %d", api.AttemptsFor(args.Key), api.ExecutionsByReference(args.Reference), tc.charges)
			}
		})
	}
}

// killableWorker runs the payment worker under a context the test can cancel mid-run, as a
// worker's death or River's shutdown would.
type killableWorker struct {
	*idemriver.Worker
	mu     sync.Mutex
	cancel context.CancelFunc
}

func (k *killableWorker) Work(ctx context.Context, job *river.Job[idemriver.PaymentArgs]) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	k.mu.Lock()
	k.cancel = cancel
	k.mu.Unlock()
	return k.Worker.Work(ctx, job)
}

func (k *killableWorker) kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cancel != nil {
		k.cancel()
	}
}

func newServer(t testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
