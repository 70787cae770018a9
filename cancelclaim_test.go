package idem

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/profile"
)

// plainStore is a Store without the optional capabilities, ManualClaimer included.
type plainStore struct{ keystore.Store }

func TestCancelProfileNeedsAManualClaimer(t *testing.T) {
	_, err := NewClient(Config{BaseURL: "http://api.test", Profile: syncAdyen, Store: plainStore{keystore.NewMemory()}})
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "keystore.ManualClaimer")
	// A profile that does not cancel needs none.
	c, err := NewClient(Config{BaseURL: "http://api.test", Profile: profile.Stripe, Store: plainStore{keystore.NewMemory()}})
	require.NoError(t, err)
	c.Close()
}

// A cancel's claimant dies with its cancel on the way. Until the claim has ended and the
// cancel's landing has passed, no verdict is given: not a person's (Resolve), and no other
// instance sends a cancel and settles. After it, the next cancel settles the record.
func TestDeadCancelsClaimHoldsEveryVerdictUntilItCanLand(t *testing.T) {
	var cancels atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/cancels" {
			cancels.Add(1)
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusInternalServerError) // Adyen's stored error
	}))
	defer api.Close()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var clk atomic.Int64
	clk.Store(now.UnixNano())
	nowf := func() time.Time { return time.Unix(0, clk.Load()).UTC() }
	advance := func(d time.Duration) { clk.Add(int64(d)) }
	store := keystore.NewMemory()
	c, err := NewClient(Config{BaseURL: api.URL, Store: store, Profile: syncAdyen, Now: nowf, Fleet: FleetConfig{Owner: "inst-1"},
		Policy: Policy{MaxAttempts: 1}, Budget: BudgetConfig{Disabled: true}})
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	op := func() *Operation {
		return NewOperation(http.MethodPost, "/v1/payments", []byte(`{"amount":1,"reference":"ord-9"}`), WithIntent("ord-9#0"))
	}
	_, err = c.Do(ctx, op())
	require.ErrorIs(t, err, ErrStoredServerError)
	rec, err := store.GetByIntent(ctx, "", "ord-9#0")
	require.NoError(t, err)

	// Another instance claimed the record for its cancel, sent it, and died.
	advance(2 * time.Minute)
	claimed, err := store.ClaimManual(ctx, "", rec.Key, keystore.Lease{Owner: "inst-2" + cancelOwnerSuffix, Now: nowf(), Until: nowf().Add(31 * time.Second)})
	require.NoError(t, err)
	landsBy := claimed.LeaseUntil.Add(profile.DefaultLanding)

	for _, at := range []time.Duration{0, 31 * time.Second, 90 * time.Second} { // live, ended, still landing
		clk.Store(claimed.LeaseUntil.Add(-31 * time.Second).Add(at).UnixNano())
		_, err = c.Resolve(ctx, "", rec.Key, Resolution{Verdict: VerdictExecuted})
		require.ErrorIs(t, err, ErrCancelInFlight, "Resolve at claim+%s", at)
		_, err = c.Do(ctx, op())
		require.ErrorIs(t, err, ErrStoredServerError, "Do at claim+%s", at)
		require.Zero(t, cancels.Load(), "no second cancel while the first may land (claim+%s)", at)
		got, err := store.Get(ctx, "", rec.Key)
		require.NoError(t, err)
		require.Equal(t, keystore.StateManual, got.State)
		require.Equal(t, claimed.Fence, got.Fence, "nobody claimed it meanwhile")
	}

	clk.Store(landsBy.UnixNano())
	_, err = c.Do(ctx, op())
	require.ErrorIs(t, err, ErrNotExecuted, "this instance's cancel, once the dead one cannot land")
	require.EqualValues(t, 1, cancels.Load())
	got, err := store.Get(ctx, "", rec.Key)
	require.NoError(t, err)
	require.Equal(t, keystore.StateFailed, got.State)
	require.Equal(t, "inst-1"+cancelOwnerSuffix, got.Owner)
	require.Equal(t, claimed.Fence+1, got.Fence)
}

// A call that leaves an Adyen record manual releases its lease (the cancel's claim would wait
// for it), and a person's verdict is not held by a lease that is not a cancel's (one left by
// a process that died right after the manual write).
func TestManualRecordsLeaseIsNotACancel(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer api.Close()
	store := keystore.NewMemory()
	c, err := NewClient(Config{BaseURL: api.URL, Store: store, Profile: syncAdyen,
		Policy: Policy{MaxAttempts: 1}, Budget: BudgetConfig{Disabled: true}})
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	_, err = c.Do(ctx, NewOperation(http.MethodPost, "/v1/payments", []byte(`{"reference":"ord-3"}`), WithIntent("ord-3")))
	require.ErrorIs(t, err, ErrStoredServerError)
	rec, err := store.GetByIntent(ctx, "", "ord-3")
	require.NoError(t, err)
	require.Equal(t, keystore.StateManual, rec.State)
	require.Empty(t, rec.Owner, "the call's lease is released")
	require.True(t, rec.LeaseUntil.IsZero())

	left := rec.Clone() // a sender's lease left on a manual record by a crash
	left.Key, left.Intent = "k-left", "ord-4"
	left.Owner, left.LeaseUntil, left.Fence = "inst-dead", time.Now().Add(time.Minute), 1
	require.NoError(t, store.Create(ctx, left))
	got, err := c.Resolve(ctx, "", "k-left", Resolution{Verdict: VerdictExecuted})
	require.NoError(t, err)
	require.Equal(t, keystore.StateSucceeded, got.State)
}

// syncAdyen is Adyen's profile with the simulators' synchronous cancel (docs/DIALECTS.md's
// convention: the 2xx means every charge of the reference is canceled).
var syncAdyen = func() profile.Profile {
	p := profile.Adyen.Clone()
	for i := range p.Settle {
		p.Settle[i].Async = false
	}
	return p
}()
