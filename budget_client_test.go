package idem

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
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
	assert.Equal(t, 0, c.Budget().Available())
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
	assert.Equal(t, 5, c.Budget().Available())

	// Now a retry is affordable again, and its success gives the tokens back.
	flaky.Store(1)
	res, err := c.Do(ctx, payment(99, "retry-again"))
	require.NoError(t, err)
	assert.Equal(t, 2, res.Attempts)
	assert.Equal(t, 5, c.Budget().Available())

	// CallNoBudget bypasses an empty bucket for one call.
	c.Budget().take(&call{}, false)
	require.Equal(t, 0, c.Budget().Available())
	flaky.Store(2)
	res, err = c.Do(ctx, payment(100, "vip"), CallNoBudget())
	require.NoError(t, err)
	assert.Equal(t, 3, res.Attempts)
	assert.Equal(t, 1, c.Budget().Available(), "no tokens taken; the success refunds one")
}
