package idem

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

// Outage, drain, deny, recovery, refill: the budget lets retries resume only after healthy
// traffic has paid for them.
func TestBudgetDrainsDeniesAndRefills(t *testing.T) {
	var down atomic.Bool
	var flaky atomic.Int64 // answers 503 to this many requests even when up
	down.Store(true)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() || flaky.Add(-1) >= 0 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	c, _, store := scriptedClient(t, h, func(c *Config) {
		c.Budget = BudgetConfig{Capacity: 10, RetryCost: 5, UnknownCost: 10, SuccessRefund: 1}
	})
	ctx := context.Background()

	// Outage: the first call spends the bucket on two retries, then is denied.
	op := payment(1, "outage-1")
	_, err := c.Do(ctx, op, CallMaxAttempts(10))
	require.ErrorIs(t, err, ErrBudgetExhausted)
	assert.Equal(t, 3, opErr(t, err).Attempts)
	assert.Equal(t, 0, c.budget.tokens())
	rec, err := store.Get(ctx, "", op.Key())
	require.NoError(t, err)
	assert.Equal(t, keystore.StatePending, rec.State, "a denied call stays reconcilable")

	// Still down: every further call makes its first attempt only.
	for i := range 5 {
		_, err := c.Do(ctx, payment(i+2, "outage"), CallMaxAttempts(10))
		require.ErrorIs(t, err, ErrBudgetExhausted)
		assert.Equal(t, 1, opErr(t, err).Attempts)
	}
	assert.Equal(t, int64(6), c.Stats().BudgetDenied)

	// Recovery: first-attempt successes refill one token each.
	down.Store(false)
	for i := range 5 {
		_, err := c.Do(ctx, payment(i+20, "ok"))
		require.NoError(t, err)
	}
	assert.Equal(t, 5, c.budget.tokens())

	// Now a retry is affordable again, and its success gives the tokens back.
	flaky.Store(1)
	res, err := c.Do(ctx, payment(99, "retry-again"))
	require.NoError(t, err)
	assert.Equal(t, 2, res.Attempts)
	assert.Equal(t, 5, c.budget.tokens())

	// CallNoBudget bypasses an empty bucket for one call.
	c.budget.take(&call{}, false)
	require.Equal(t, 0, c.budget.tokens())
	flaky.Store(2)
	res, err = c.Do(ctx, payment(100, "vip"), CallNoBudget())
	require.NoError(t, err)
	assert.Equal(t, 3, res.Attempts)
	assert.Equal(t, 1, c.budget.tokens(), "no tokens taken; the success refunds one")
}

// A resumed record that was sent before is resent under the retry budget, like a retry: a
// restart's Recover (or a fleet's reclaimer) during an outage resends only what the budget
// allows. Before, every pending record was resent whatever the budget held: four records,
// four resends, into an API answering 503 "come back in an hour".
func TestResumedResendsTakeBudgetTokens(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status outcome.KeyStatusFunc // nil: no status endpoint; records left "not executed" resend as they are
		state  bool                  // the status endpoint says not_found: a resend of an unknown outcome
	}{
		{"not executed, resent without asking", nil, false},
		{"unknown, resent after not_found", func(context.Context, outcome.KeyStatusRequest) (outcome.KeyStatus, error) {
			return outcome.KeyStatus{State: outcome.KeyStatusNotFound}, nil
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newLedgerAPI(t, unavailable503("3600")) // longer than MaxRetryAfter: the call stops
			store := keystore.NewMemory()
			c, _ := ledgerClient(t, a, func(cfg *Config) {
				cfg.Store = store
				cfg.KeyStatusURL = ""
				cfg.Budget = BudgetConfig{Capacity: 20, RetryCost: 10, UnknownCost: 10}
			})
			var keys []string
			for i := range 4 {
				op := payment(100+i, fmt.Sprint("order-", i), WithIntent(fmt.Sprint("order-", i)))
				_, err := c.Do(context.Background(), op)
				require.ErrorIs(t, err, ErrRetryAfterTooLong)
				keys = append(keys, op.Key())
			}
			require.Equal(t, int64(4), a.posts.Load(), "first attempts take no token")
			if tc.state {
				// An earlier process's outcome is unknown (a crash mid-request): ask first.
				for _, k := range keys {
					rec, err := store.Get(context.Background(), "", k)
					require.NoError(t, err)
					rec.NotExecuted = false
					require.NoError(t, store.Update(context.Background(), rec))
				}
			}

			// A restarted process (the first one gone: its leases released): a full bucket of 20
			// pays for two resends of 10.
			require.NoError(t, c.Close())
			restarted, clk := ledgerClient(t, a, func(cfg *Config) {
				cfg.Store = store
				cfg.KeyStatusURL, cfg.KeyStatusFunc = "", tc.status
				cfg.Budget = BudgetConfig{Capacity: 20, RetryCost: 10, UnknownCost: 10}
			})
			rep, err := restarted.Recover(context.Background(), nil)
			require.NoError(t, err)
			assert.Equal(t, 4, rep.Pending)
			assert.Equal(t, int64(7), a.posts.Load(), "two resends the bucket pays, one on the floor (ResendFloor), then the budget holds the last back")
			assert.Equal(t, int64(1), restarted.Stats().BudgetDenied)

			// The bucket stays empty (nothing answered), but the floor lets one resend a
			// second through: pending records are never held back for good.
			_, err = restarted.Recover(context.Background(), nil)
			require.NoError(t, err)
			assert.Equal(t, int64(7), a.posts.Load(), "within the same second: nothing")
			assert.Equal(t, int64(5), restarted.Stats().BudgetDenied, "each of the four denied")
			clk.Advance(resendFloor)
			_, err = restarted.Recover(context.Background(), nil)
			require.NoError(t, err)
			assert.Equal(t, int64(8), a.posts.Load(), "a second later: one more")
			for _, k := range keys {
				rec, err := store.Get(context.Background(), "", k)
				require.NoError(t, err)
				assert.Equal(t, keystore.StatePending, rec.State, "still pending: a later Do or Recover")
			}
		})
	}
}

// After an outage drained the bucket, a client whose only traffic is its pending records still
// resends them once the API answers again: the floor lets one through, and each answer to a
// resumed resend pays for the next. Before, none was ever sent again in that process.
func TestPendingRecordsResentAfterTheOutage(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, _ int64) {
		if down.Load() {
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		a.charge(w, key, ref)
	})
	c, clk := ledgerClient(t, a, func(cfg *Config) {
		cfg.KeyStatusURL = ""
		cfg.Budget = BudgetConfig{Capacity: 30, RetryCost: 10, UnknownCost: 10}
	})
	const n = 12
	for i := range n {
		_, err := c.Do(context.Background(), payment(100+i, fmt.Sprint("order-", i), WithIntent(fmt.Sprint("order-", i))))
		require.ErrorIs(t, err, ErrRetryAfterTooLong)
	}
	rep, err := c.Recover(context.Background(), nil) // still down: the bucket drains
	require.NoError(t, err)
	require.Equal(t, n, rep.Pending)
	require.Zero(t, c.budget.tokens())

	down.Store(false)
	clk.Advance(resendFloor) // the floor is due again: one resend, whose answer pays for the next
	// Recover runs records side by side, so those started while the bucket was empty are
	// denied; each pass finds the bucket refilled by the last one's answers. No clock moves:
	// the floor alone (one a second) would take n seconds.
	passes := 0
	for ; passes < n; passes++ {
		rep, err := c.Recover(context.Background(), nil)
		require.NoError(t, err)
		if rep.Pending == 0 {
			break
		}
	}
	// The clock never moves: the floor alone would have sent one record in all, so all n
	// sent means each success paid for the next.
	pending, err := c.cfg.Store.List(context.Background(), keystore.StatePending)
	require.NoError(t, err)
	assert.Empty(t, pending, "every pending record was resent once the API answered")
	for i := range n {
		assert.Equal(t, 1, a.charges(fmt.Sprint("order-", i)), "order-%d", i)
	}
}

// Refusals to resumed resends (a 422 from an API whose dependency broke) must not fill an
// empty bucket: from zero, with the clock still, only the floor's one resend goes out, and
// the bucket stays empty for the retries of new work into the outage. Before, each answered
// resend put one more resend's worth back: 120 resends in one pass and a full bucket.
func TestRefusedResendsDoNotFillTheBudget(t *testing.T) {
	var refuse atomic.Bool
	var posts atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		posts.Add(1)
		if !refuse.Load() {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusUnprocessableEntity)
	})
	c, clk, _ := scriptedClient(t, h, func(cfg *Config) { cfg.Budget = BudgetConfig{}; cfg.RecoverConcurrency = 1 })
	ctx := context.Background()
	for i := range 20 { // 503 at one attempt: pending, known not executed, sent before
		_, err := c.Do(ctx, payment(i+1, fmt.Sprintf("p-%d", i)), CallMaxAttempts(1))
		require.Error(t, err)
	}
	for i := 0; c.budget.tokens() > 0; i++ { // the outage drains the bucket
		_, _ = c.Do(ctx, payment(999, fmt.Sprintf("drain-%d", i)), CallMaxAttempts(100))
	}
	clk.Advance(10 * time.Minute) // past the lease holds
	refuse.Store(true)
	before := posts.Load()
	for range 3 { // the clock does not move: the floor is due once
		_, err := c.Recover(ctx, nil)
		require.NoError(t, err)
	}
	assert.Equal(t, int64(1), posts.Load()-before, "the floor's one resend")
	assert.Zero(t, c.budget.tokens(), "a refusal puts back only what it took")
}
