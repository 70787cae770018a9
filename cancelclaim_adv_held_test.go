package idem

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
)

// Three instances run Recover at once on one manual record: one cancel is sent, one verdict
// written; the others neither cancel nor settle. (Held.)
func TestAdvRecoverOnThreeInstancesAtOnce(t *testing.T) {
	for round := 0; round < 20; round++ {
		l, store, clk, mk := advSetup(t)
		insts := []*Client{mk("i1"), mk("i2"), mk("i3")}
		ctx := context.Background()
		_, err := insts[0].Do(ctx, advOp("ord-x#0"))
		require.ErrorIs(t, err, ErrStoredServerError)
		clk.Add(2 * time.Minute)
		var wg sync.WaitGroup
		var resolved atomic.Int32
		for _, c := range insts {
			wg.Go(func() {
				rep, err := c.Recover(ctx, nil)
				require.NoError(t, err)
				resolved.Add(int32(rep.Resolved))
			})
		}
		wg.Wait()
		require.EqualValues(t, 1, l.cancels.Load(), "round %d", round)
		require.EqualValues(t, 1, resolved.Load(), "round %d", round)
		rec, err := store.GetByIntent(ctx, "", "ord-x#0")
		require.NoError(t, err)
		require.Equal(t, keystore.StateFailed, rec.State)
	}
}

// A cancel answered 503: the record stays manual under the claim; an immediate Do, Recover
// on another instance, and a person's "not executed" all wait for its landing; then the next
// cancel settles it. (Held.)
func TestAdvCancelAnswered5xxThenRetried(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	var cancels atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/cancels" {
			cancels.Add(1)
			if fail.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer api.Close()
	clk := &testClock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	store := keystore.NewMemory()
	mk := func(owner string) *Client {
		c, err := NewClient(Config{BaseURL: api.URL, Store: store, Profile: syncAdyen, Now: clk.Now, Fleet: FleetConfig{Owner: owner},
			Policy: Policy{MaxAttempts: 1}, Budget: BudgetConfig{Disabled: true}})
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := mk("a"), mk("b")
	ctx := context.Background()
	_, err := a.Do(ctx, advOp("ord-x#0"))
	require.ErrorIs(t, err, ErrStoredServerError)
	rec, err := store.GetByIntent(ctx, "", "ord-x#0")
	require.NoError(t, err)
	clk.Add(2 * time.Minute)
	_, err = a.Do(ctx, advOp("ord-x#0"))
	require.ErrorIs(t, err, ErrStoredServerError)
	require.EqualValues(t, 1, cancels.Load())
	fail.Store(false)
	// The claim covers the attempt (10 s), a second and the landing (60 s); readers add their
	// landing on top: held until 131 s after the claim.
	for _, at := range []time.Duration{0, 30 * time.Second, 60 * time.Second, 90 * time.Second, 120 * time.Second} {
		_, err = a.Do(ctx, advOp("ord-x#0"))
		require.ErrorIs(t, err, ErrStoredServerError, "+%s", at)
		rep, err := b.Recover(ctx, nil)
		require.NoError(t, err)
		require.Zero(t, rep.Resolved)
		_, err = b.Resolve(ctx, "", rec.Key, Resolution{Verdict: VerdictNotExecuted})
		require.ErrorIs(t, err, ErrCancelInFlight)
		require.EqualValues(t, 1, cancels.Load())
		clk.Add(30 * time.Second)
	}
	clk.Add(5 * time.Second)
	_, err = a.Do(ctx, advOp("ord-x#0"))
	require.ErrorIs(t, err, ErrNotExecuted)
	require.EqualValues(t, 2, cancels.Load())
}

// An attempt whose answer never came leaves the record pending; a day later the key is past
// Adyen's KeyTTL: the record becomes manual (key expired), is never resent, and the cancel
// goes only ExpiredKeySettleDelay and the landing after its last write. (Held.)
func TestAdvExpiredKeyCancelWaits(t *testing.T) {
	var pays, cancels atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/cancels" {
			cancels.Add(1)
			w.WriteHeader(http.StatusOK)
			return
		}
		pays.Add(1)
		_, _ = io.Copy(io.Discard, r.Body) // so that the server sees the client hang up
		<-r.Context().Done()               // no answer: unknown outcome
	}))
	defer api.Close()
	clk := &testClock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	store := keystore.NewMemory()
	c, err := NewClient(Config{BaseURL: api.URL, Store: store, Profile: syncAdyen, Now: clk.Now, Fleet: FleetConfig{Owner: "a"},
		Policy: Policy{MaxAttempts: 1, AttemptTimeout: 100 * time.Millisecond}, Budget: BudgetConfig{Disabled: true}})
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	_, err = c.Do(ctx, advOp("ord-x#0"))
	require.Error(t, err)
	rec, err := store.GetByIntent(ctx, "", "ord-x#0")
	require.NoError(t, err)
	require.Equal(t, keystore.StatePending, rec.State)
	clk.Add(25 * time.Hour)
	_, err = c.Do(ctx, advOp("ord-x#0"))
	require.ErrorIs(t, err, ErrKeyExpired)
	require.EqualValues(t, 1, pays.Load(), "never resent")
	require.Zero(t, cancels.Load())
	rec, err = store.Get(ctx, "", rec.Key)
	require.NoError(t, err)
	require.Equal(t, keystore.StateManual, rec.State)
	require.Empty(t, rec.Owner, "the call's lease was released")
	clk.Add(59 * time.Second)
	_, err = c.Do(ctx, advOp("ord-x#0"))
	require.ErrorIs(t, err, ErrKeyExpired)
	require.Zero(t, cancels.Load())
	clk.Add(2 * time.Second)
	_, err = c.Do(ctx, advOp("ord-x#0"))
	require.ErrorIs(t, err, ErrNotExecuted)
	require.EqualValues(t, 1, cancels.Load())
}
