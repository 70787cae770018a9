package idem

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

// A record written while the clock ran far ahead, then read after the clock was corrected,
// has a CreatedAt in the future: its age looked negative, never past KeyTTL, and once the
// server had forgotten the key ("not found") the resend charged a second time (adversarial
// run). A key created later than now by more than MaxClockSkew has an unknown age: it is
// expired, never resent, and the record waits for a lookup or a person.
func TestClockSteppedBackNeverResendsAnOldKey(t *testing.T) {
	a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, _ int64) {
		a.charge(httptest.NewRecorder(), key, ref)
		panic(http.ErrAbortHandler) // charged, the answer lost
	})
	var forgot atomic.Bool
	c, clk := ledgerClient(t, a, func(cfg *Config) {
		cfg.Policy = Policy{MaxAttempts: 3, MaxKeyStatusChecks: 2}
		cfg.KeyStatusFunc = func(context.Context, outcome.KeyStatusRequest) (outcome.KeyStatus, error) {
			if !forgot.Load() {
				return outcome.KeyStatus{}, errors.New("status endpoint unavailable")
			}
			return outcome.KeyStatus{State: outcome.KeyStatusNotFound}, nil // past the server's retention
		}
	})
	clk.Advance(365 * 24 * time.Hour) // the host's clock a year ahead
	op := payment(1, "order-skew", WithIntent("order-skew"))
	_, err := c.Do(context.Background(), op)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.Equal(t, 1, a.charges("order-skew"))

	clk.Advance(-365*24*time.Hour + 3*24*time.Hour) // corrected: three days after the send
	forgot.Store(true)
	_, err = c.Do(context.Background(), op)
	require.ErrorIs(t, err, ErrKeyExpired)
	assert.Contains(t, err.Error(), "clock moved back")
	assert.Equal(t, 1, a.charges("order-skew"), "a key of unknown age was resent")
	assert.EqualValues(t, 1, a.posts.Load())

	// Created within MaxClockSkew of now (another instance's clock a little ahead): asked
	// about and resent as usual.
	forgot.Store(false)
	op2 := payment(2, "order-near", WithIntent("order-near"))
	_, err = c.Do(context.Background(), op2)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	clk.Advance(-DefaultMaxClockSkew / 2)
	forgot.Store(true)
	posts := a.posts.Load()
	_, err = c.Do(context.Background(), op2)
	require.ErrorIs(t, err, ErrExhausted) // resent under its key: the server replays, the answer is lost again
	assert.Greater(t, a.posts.Load(), posts)
	assert.Equal(t, 1, a.charges("order-near"))
}

// Two instances each within MaxClockSkew of the store may be twice that apart: a record
// written by one 4 s ahead of the store, continued by one 4 s behind (default 5 s), was
// "created in the future" and expired, a fresh key never executed going manual; with the
// check off (MaxClockSkew < 0) instances 1 s apart did the same (adversarial run). The
// tolerance is twice MaxClockSkew (twice the default when the check is off).
func TestFleetSkewWithinTheBoundIsNoClockStep(t *testing.T) {
	for _, tc := range []struct {
		name          string
		ahead, behind time.Duration
		maxSkew       time.Duration
		wantExpired   bool
	}{
		{"each 4s from the store", 4 * time.Second, 4 * time.Second, 0, false},
		{"check off, 1s apart", 500 * time.Millisecond, 500 * time.Millisecond, -1, false},
		{"check off, 11s apart", 6 * time.Second, 5 * time.Second, -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var down atomic.Bool
			down.Store(true)
			a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, _ int64) {
				if down.Load() {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				a.charge(w, key, ref)
			})
			base := time.Now().Truncate(time.Second)
			store := &clockStore{Memory: keystore.NewMemory(), now: base}
			clkA, clkB := newFakeClock(), newFakeClock()
			clkA.now, clkB.now = base.Add(tc.ahead), base.Add(-tc.behind)
			mk := func(clk *fakeClock, owner string) *Client {
				c, err := NewClient(Config{BaseURL: a.srv.URL, KeyStatusURL: statusPath, Store: store, Fleet: FleetConfig{Owner: owner, MaxClockSkew: tc.maxSkew},
					Now: clk.Now, Sleep: clk.Sleep, Policy: Policy{MaxAttempts: 1}, Budget: BudgetConfig{Disabled: true}})
				require.NoError(t, err)
				t.Cleanup(func() { c.Close() })
				return c
			}
			ca, cb := mk(clkA, "instance-a"), mk(clkB, "instance-b")
			op := payment(1, "order-s", WithIntent("order-s"))
			_, err := ca.Do(context.Background(), op)
			require.ErrorIs(t, err, ErrExhausted) // a 503: nothing executed, the record pending
			// a holds its lease for the backoff (holdAfter), which b would wait out on its
			// own fake clock, closing the gap under test: release it, as at a's exit.
			held, err := store.Get(context.Background(), "", op.Key())
			require.NoError(t, err)
			require.NoError(t, store.Release(context.Background(), "", op.Key(), "instance-a", held.Fence))
			down.Store(false)
			_, err = cb.Do(context.Background(), payment(1, "order-s", WithIntent("order-s")))
			if tc.wantExpired {
				require.ErrorIs(t, err, ErrKeyExpired)
				assert.Equal(t, 0, a.charges("order-s"))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, 1, a.charges("order-s"))
		})
	}
}
