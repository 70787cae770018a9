package idem

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

// pendingRecord persists a record as a process would right before sending, then "crashes".
func pendingRecord(t *testing.T, store keystore.Store, op *Operation, created time.Time) {
	t.Helper()
	require.NoError(t, store.Create(context.Background(), &keystore.Record{
		Key: op.Key(), Intent: op.Intent(), Fingerprint: Fingerprint(op.Method(), op.URL(), op.Body()),
		State: keystore.StatePending, CreatedAt: created, UpdatedAt: created,
		Request: keystore.Request{Method: op.Method(), URL: op.URL(), Body: op.Body(),
			Header: http.Header{"Content-Type": {"application/json"}}},
	}))
}

func TestRecoverReconcilesPendingRecords(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, nil)
	ctx := context.Background()

	// 1: sent and committed, the answer lost: the status endpoint resolves it, no resend.
	sent := payment(100, "sent")
	e.srv.Script(idemtest.FaultDropAfterCommit)
	pendingRecord(t, e.store, sent, e.clock.Now())
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/payments", nopBody(sent.Body()))
	req.Header.Set("Idempotency-Key", sent.Key())
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	require.Equal(t, 1, e.srv.ExecutionsFor(sent.Key()))

	// 2: persisted, never sent: not found, so it is sent with the same key.
	unsent := payment(200, "unsent")
	pendingRecord(t, e.store, unsent, e.clock.Now())

	// 3: never sent and older than KeyTTL: never resent, reported for manual reconciliation.
	old := payment(300, "old")
	pendingRecord(t, e.store, old, e.clock.Now().Add(-DefaultKeyTTL-time.Hour))

	var mu sync.Mutex
	got := map[string]Reconciled{}
	rep, err := e.c.Recover(ctx, func(r Reconciled) {
		mu.Lock()
		defer mu.Unlock()
		got[r.Record.Key] = r
	})
	require.NoError(t, err)
	assert.Equal(t, RecoverReport{Pending: 3, Succeeded: 2, Manual: 1}, rep)

	require.NoError(t, got[sent.Key()].Err)
	assert.Equal(t, outcome.SourceKeyStatus, got[sent.Key()].Result.Source)
	assert.Equal(t, 1, e.srv.AttemptsFor(sent.Key()), "resolved without a resend")

	require.NoError(t, got[unsent.Key()].Err)
	assert.Equal(t, 1, e.srv.AttemptsFor(unsent.Key()))
	assert.Equal(t, 1, e.srv.ExecutionsFor(unsent.Key()))

	require.ErrorIs(t, got[old.Key()].Err, ErrKeyExpired)
	assert.Equal(t, 0, e.srv.AttemptsFor(old.Key()), "an expired key is never resent")
	assert.Equal(t, keystore.StateManual, e.record(old.Key()).State)
	assert.Equal(t, keystore.StateSucceeded, e.record(sent.Key()).State)
	assert.Equal(t, keystore.StateSucceeded, e.record(unsent.Key()).State)

	// Nothing left: a second run finds no pending record.
	rep, err = e.c.Recover(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, 0, rep.Pending)
}

func TestRecoverWithoutStatusEndpoint(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, func(c *Config) { c.KeyStatusURL = "" })
	young, old := payment(1, "young"), payment(2, "old")
	pendingRecord(t, e.store, young, e.clock.Now().Add(-time.Hour))
	pendingRecord(t, e.store, old, e.clock.Now().Add(-25*time.Hour))
	rep, err := e.c.Recover(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, RecoverReport{Pending: 2, Succeeded: 1, Manual: 1}, rep)
	assert.Equal(t, 1, e.srv.ExecutionsFor(young.Key()), "young key resent: the server deduplicates")
	assert.Equal(t, 0, e.srv.AttemptsFor(old.Key()))
}

// Credentials are never persisted; after a restart Config.Credentials supplies them again.
func TestCredentialsNeverPersistedAndReappliedOnRecover(t *testing.T) {
	e := newEnv(t, idemtest.Config{KeyStatusFaultRate: 1}, nil)
	e.srv.Script(idemtest.FaultDropAfterCommit)
	op := payment(5, "cred", WithHeader(http.Header{
		"Authorization": {"Bearer sk_acme"}, "Cookie": {"s=1"}, "X-Api-Secret": {"shh"}, "X-Trace": {"t1"}}))
	_, err := e.c.Do(context.Background(), op, CallMaxKeyStatusChecks(1))
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	rec := e.record(op.Key())
	assert.Empty(t, rec.Request.Header.Get("Authorization"))
	assert.Empty(t, rec.Request.Header.Get("Cookie"))
	assert.Equal(t, "t1", rec.Request.Header.Get("X-Trace"))
	assert.Equal(t, "Bearer sk_acme", e.srv.Executions()[0].Tenant)

	// A restarted process: new client on the same store, credentials from the hook. The
	// first one closes, releasing the lease it kept on the record for the backoff.
	require.NoError(t, e.c.Close())
	srv2 := e.srv // same API
	c2, err := NewClient(Config{BaseURL: srv2.URL, Store: e.store, KeyStatusURL: statusPath,
		Credentials: func(r *http.Request) error { r.Header.Set("Authorization", "Bearer sk_acme"); return nil }})
	require.NoError(t, err)
	// The status endpoint is still failing, so the status check cannot resolve it; with a
	// working one, it would. Resolve through a resend with the same key instead: no status.
	rep, err := c2.Recover(context.Background(), nil, CallKeyStatusURL(""))
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Succeeded)
	assert.Equal(t, 1, e.srv.ExecutionsFor(op.Key()), "same tenant, same key: replayed, not executed again")
	assert.Equal(t, 1, e.srv.Stats().Replays)
}

func TestSecretHeadersConfig(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, func(c *Config) { c.SecretHeaders = []string{"X-Api-Secret"} })
	op := payment(5, "s", WithHeader(http.Header{"X-Api-Secret": {"shh"}}))
	_, err := e.c.Do(context.Background(), op)
	require.NoError(t, err)
	assert.Empty(t, e.record(op.Key()).Request.Header.Get("X-Api-Secret"))
}

// A restarted process names the same intent: it continues the persisted key, not a new one.
func TestIntentContinuesPersistedKey(t *testing.T) {
	e := newEnv(t, idemtest.Config{KeyStatusFaultRate: 1}, nil)
	e.srv.Script(idemtest.FaultDropAfterCommit)
	first := payment(77, "order-9", WithIntent("order-9"))
	_, err := e.c.Do(context.Background(), first, CallMaxKeyStatusChecks(1))
	require.ErrorIs(t, err, ErrOutcomeUnknown)

	c2, err := NewClient(Config{BaseURL: e.srv.URL, Store: e.store, Now: e.clock.Now, Sleep: e.clock.Sleep})
	require.NoError(t, err)
	again := payment(77, "order-9", WithIntent("order-9"))
	require.NotEqual(t, first.Key(), again.Key())
	res, err := c2.Do(context.Background(), again) // no status endpoint: resend the persisted key
	require.NoError(t, err)
	assert.Equal(t, first.Key(), res.Key)
	assert.Equal(t, outcome.SourceReplay, res.Source)
	assert.Equal(t, 1, e.srv.ExecutionsByReference("order-9"))
	assert.Equal(t, 0, e.srv.AttemptsFor(again.Key()))

	// Same intent, another payload: a conflict, not a second payment.
	_, err = c2.Do(context.Background(), payment(78, "order-9", WithIntent("order-9")))
	require.ErrorIs(t, err, ErrKeyConflict)
}

func TestRecoverPurgesOldTerminalRecords(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, nil)
	op := payment(1, "p")
	_, err := e.c.Do(context.Background(), op)
	require.NoError(t, err)
	e.clock.Advance(defaultRetention + time.Minute)
	rep, err := e.c.Recover(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Purged)
	_, err = e.store.Get(context.Background(), "", op.Key())
	require.ErrorIs(t, err, keystore.ErrNotFound)
}

// Recover leaves alone a key that a Do in this process is sending.
func TestRecoverSkipsInFlightCalls(t *testing.T) {
	e := newEnv(t, idemtest.Config{SlowDelay: 200 * time.Millisecond}, nil)
	e.srv.Script(idemtest.FaultSlow)
	op := payment(1, "inflight")
	done := make(chan error, 1)
	go func() {
		_, err := e.c.Do(context.Background(), op, CallAttemptTimeout(5*time.Second))
		done <- err
	}()
	require.Eventually(t, func() bool { return e.srv.AttemptsFor(op.Key()) == 1 }, 2*time.Second, time.Millisecond)
	rep, err := e.c.Recover(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, RecoverReport{Pending: 1, Skipped: 1}, rep)
	require.NoError(t, <-done)
	assert.Equal(t, 1, e.srv.AttemptsFor(op.Key()))
	assert.Equal(t, 1, e.srv.ExecutionsFor(op.Key()))
}

// A call that ended knowing nothing was executed (dial refused, 503) leaves a record that
// the next call sends at once, without asking the status endpoint; the record says "may be
// sent" again before that send leaves, so a crash then is still asked about.
func TestNotExecutedRecordIsResentWithoutStatusCheck(t *testing.T) {
	var e *env
	var notExecutedAtArrival []bool
	e = newEnv(t, idemtest.Config{OnPayment: func(r *http.Request) {
		rec, err := e.store.Get(context.Background(), "", r.Header.Get("Idempotency-Key"))
		if err == nil {
			notExecutedAtArrival = append(notExecutedAtArrival, rec.NotExecuted)
		}
	}}, nil)
	e.srv.Script(idemtest.Fault503, idemtest.Fault503)
	op := payment(8, "ne", WithIntent("order-ne"))
	_, err := e.c.Do(context.Background(), op, CallMaxAttempts(2))
	require.ErrorIs(t, err, ErrExhausted)
	assert.False(t, opErr(t, err).Unknown)
	rec := e.record(op.Key())
	assert.Equal(t, keystore.StatePending, rec.State)
	assert.True(t, rec.NotExecuted)

	res, err := e.c.Do(context.Background(), op)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Attempts)
	assert.Equal(t, 0, res.KeyStatusChecks)
	assert.Equal(t, 0, e.srv.KeyStatusChecks())
	assert.Equal(t, []bool{false, false, false}, notExecutedAtArrival)
	assert.False(t, e.record(op.Key()).NotExecuted)
}

// A target that refuses connections: never "outcome unknown", never a status storm.
func TestUnreachableTargetStaysNotExecuted(t *testing.T) {
	c, err := NewClient(Config{BaseURL: "http://127.0.0.1:1", KeyStatusURL: statusPath,
		Sleep: func(context.Context, time.Duration) error { return nil }})
	require.NoError(t, err)
	op := payment(1, "dead", WithIntent("dead"))
	for range 3 {
		_, err = c.Do(context.Background(), op, CallMaxAttempts(2))
		require.ErrorIs(t, err, ErrExhausted)
		require.NotErrorIs(t, err, ErrOutcomeUnknown)
	}
	assert.Equal(t, int64(0), c.Stats().KeyStatusChecks)
	assert.Equal(t, int64(6), c.Stats().Attempts)
}

// Records this client can never send (a URL it cannot resolve, a broken method) are marked
// manual and reported once, not retried at every start.
func TestRecoverMarksUnsendableRecordsManual(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, nil)
	now := e.clock.Now()
	for i, r := range []keystore.Request{{Method: "POST", URL: "mailto:ops@example.com"}, {Method: "GE T", URL: "/v1/payments"}} {
		require.NoError(t, e.store.Create(context.Background(), &keystore.Record{Key: "odd-" + string(rune('a'+i)),
			State: keystore.StatePending, Request: r, CreatedAt: now, UpdatedAt: now}))
	}
	var mu sync.Mutex
	var errs []error
	rep, err := e.c.Recover(context.Background(), func(r Reconciled) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, r.Err)
	})
	require.NoError(t, err)
	assert.Equal(t, RecoverReport{Pending: 2, Manual: 2}, rep)
	for _, err := range errs {
		assert.ErrorIs(t, err, ErrInvalidOperation)
		assert.ErrorIs(t, err, ErrOutcomeUnknown)
	}
	assert.Equal(t, keystore.StateManual, e.record("odd-a").State)
	rep, err = e.c.Recover(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, 0, rep.Pending)
	assert.Equal(t, 0, e.srv.Stats().Requests)
}
