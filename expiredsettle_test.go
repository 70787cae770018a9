package idem

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

// A clock stepped back after a timed-out attempt made the key's age unknown, so the next Do
// expired it and asked the lookup at once; the search found nothing because the request was
// still on its way, the verdict "not executed" was persisted, the caller paid a new intent
// as README says, and the late request charged the order a second time (adversarial run).
// "Not executed" for an expired key waits ExpiredKeySettleDelay after its last request.
func TestExpiredKeyNotSettledWhileItsRequestMayLand(t *testing.T) {
	var (
		mu   sync.Mutex
		land func() // the first request, held by the server: it charges when called
	)
	a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, n int64) {
		if n == 1 {
			mu.Lock()
			land = func() { a.charge(discardWriter{}, key, ref) }
			mu.Unlock()
			panic(http.ErrAbortHandler) // the client sees no answer; the charge comes later
		}
		a.charge(w, key, ref)
	})
	c, clk := ledgerClient(t, a, func(cfg *Config) {
		cfg.KeyStatusURL = "" // nothing to ask but the lookup
		cfg.Policy = Policy{MaxAttempts: 1}
		cfg.Lookup = func(_ context.Context, req LookupRequest) (Resolution, error) {
			var p struct{ Reference string }
			if err := json.Unmarshal(req.Record.Request.Body, &p); err != nil {
				return Resolution{}, err
			}
			if a.charges(p.Reference) > 0 {
				return Resolution{Verdict: VerdictExecuted, Response: &keystore.Response{StatusCode: http.StatusOK, Body: []byte(`{"id":"ch_1"}`)}}, nil
			}
			return Resolution{Verdict: VerdictNotExecuted}, nil
		}
	})
	clk.Advance(time.Minute) // the host's clock a minute ahead
	op := payment(1, "order-42", WithIntent("order-42"))
	_, err := c.Do(context.Background(), op)
	require.ErrorIs(t, err, ErrOutcomeUnknown)

	clk.Advance(-time.Minute) // NTP steps it back
	_, err = c.Do(context.Background(), op)
	require.ErrorIs(t, err, ErrKeyExpired, "a search that found nothing settled a key whose request may still land")
	require.NotErrorIs(t, err, ErrNotExecuted)
	rep, err := c.Recover(context.Background(), nil) // nor does Recover settle it yet
	require.NoError(t, err)
	assert.Equal(t, 0, rep.Resolved)
	rec, err := c.store.Get(context.Background(), "", op.Key())
	require.NoError(t, err)
	assert.Equal(t, keystore.StateManual, rec.State)

	mu.Lock()
	land() // the first request executes
	mu.Unlock()
	clk.Advance(time.Minute + expiredKeySettleDelay)
	res, err := c.Do(context.Background(), op)
	require.NoError(t, err)
	assert.Equal(t, outcome.SourceLookup, res.Source)
	assert.Equal(t, 1, a.charges("order-42"))
	assert.EqualValues(t, 1, a.posts.Load(), "an expired key is never resent")
}

// The clock stepped back an hour after the send, then forward again: the write that made the
// record manual, under the stepped-back clock, moved its UpdatedAt an hour back, so 5 s after
// the only send the wait was over and "not executed" settled it; the late request and the new
// intent charged twice (adversarial run). The client's writes never move UpdatedAt back, and
// the wait never starts before CreatedAt.
func TestExpiredKeyClockBackThenForward(t *testing.T) {
	var (
		mu   sync.Mutex
		land func()
	)
	a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, n int64) {
		if n == 1 {
			mu.Lock()
			land = func() { a.charge(discardWriter{}, key, ref) }
			mu.Unlock()
			panic(http.ErrAbortHandler)
		}
		a.charge(w, key, ref)
	})
	c, clk := ledgerClient(t, a, func(cfg *Config) {
		cfg.KeyStatusURL = ""
		cfg.Policy = Policy{MaxAttempts: 1}
		cfg.Lookup = ledgerLookup(a)
	})
	op := payment(1, "order-vm", WithIntent("order-vm"))
	_, err := c.Do(context.Background(), op) // sent at T0, the answer lost
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	sent := clk.Now()

	clk.Advance(-time.Hour) // a snapshot restored: the clock an hour back
	_, err = c.Do(context.Background(), op)
	require.ErrorIs(t, err, ErrKeyExpired)
	rec, err := c.store.Get(context.Background(), "", op.Key())
	require.NoError(t, err)
	assert.False(t, rec.UpdatedAt.Before(sent), "UpdatedAt moved back to %s", rec.UpdatedAt)

	clk.Advance(time.Hour + 5*time.Second) // NTP corrects it: 5 s after the send
	_, err = c.Do(context.Background(), op)
	require.ErrorIs(t, err, ErrKeyExpired, "settled 5 s after the key's only request was sent")
	require.NotErrorIs(t, err, ErrNotExecuted)

	mu.Lock()
	land()
	mu.Unlock()
	clk.Advance(expiredKeySettleDelay + time.Minute)
	res, err := c.Do(context.Background(), op)
	require.NoError(t, err)
	assert.Equal(t, outcome.SourceLookup, res.Source)
	assert.Equal(t, 1, a.charges("order-vm"))
}

// The wait counts from the latest time a request of the key can have been sent: the
// record's last write, or its lease expiry when that is later (a crash mid-call leaves the
// lease it sent under).
func TestTooSoonForNotExecuted(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		reason     string
		updated    time.Time
		leaseUntil time.Time
		now        time.Time
		tooSoon    bool
	}{
		{"stored 5xx: no wait", keystore.ReasonStoredServerError, t0, time.Time{}, t0, false},
		{"just written manual", reasonKeyExpired, t0, time.Time{}, t0, true},
		{"one second short", reasonKeyExpired, t0, time.Time{}, t0.Add(expiredKeySettleDelay - time.Second), true},
		{"delay passed", reasonKeyExpired, t0, time.Time{}, t0.Add(expiredKeySettleDelay), false},
		{"lease later than the write", reasonKeyExpired, t0, t0.Add(30 * time.Second), t0.Add(expiredKeySettleDelay), true},
		{"lease later, delay passed", reasonKeyExpired, t0, t0.Add(30 * time.Second), t0.Add(30*time.Second + expiredKeySettleDelay), false},
		{"written in the future (clock back)", reasonKeyExpired, t0.Add(time.Hour), time.Time{}, t0.Add(expiredKeySettleDelay), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Client{cfg: Config{Now: func() time.Time { return tc.now }}}
			err := c.tooSoonForNotExecuted(&keystore.Record{Reason: tc.reason, UpdatedAt: tc.updated, LeaseUntil: tc.leaseUntil})
			assert.Equal(t, tc.tooSoon, err != nil, "err = %v", err)
		})
	}
}

// discardWriter is an http.ResponseWriter that keeps nothing.
type discardWriter struct{}

func (discardWriter) Header() http.Header         { return http.Header{} }
func (discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (discardWriter) WriteHeader(int)             {}
