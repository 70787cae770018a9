package idem

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bgSmall is the small bucket of the drain tests.
var bgSmall = BudgetConfig{Capacity: 20, RetryCost: 5, UnknownCost: 10, SuccessRefund: 1}

func bgNew(t *testing.T, cfg BudgetConfig) *retryBudget {
	t.Helper()
	b, err := newRetryBudget(cfg)
	require.NoError(t, err)
	require.NotNil(t, b)
	return b
}

func TestNewBudgetDefaults(t *testing.T) {
	b := bgNew(t, BudgetConfig{})
	assert.Equal(t, BudgetConfig{
		Capacity:      defaultBudgetCapacity,
		RetryCost:     defaultBudgetRetryCost,
		UnknownCost:   defaultBudgetUnknownCost,
		SuccessRefund: defaultBudgetSuccessRefund,
	}, b.cfg)
	assert.Equal(t, 500, b.tokens(), "starts full")
	assert.Equal(t, 500, defaultBudgetCapacity)
	assert.Equal(t, 5, defaultBudgetRetryCost)
	assert.Equal(t, 10, defaultBudgetUnknownCost)
	assert.Equal(t, 1, defaultBudgetSuccessRefund)

	partial := bgNew(t, BudgetConfig{Capacity: 7, UnknownCost: 3})
	assert.Equal(t, BudgetConfig{Capacity: 7, RetryCost: 5, UnknownCost: 3, SuccessRefund: 1}, partial.cfg)
	assert.Equal(t, 7, partial.tokens())
}

func TestNewBudgetInvalid(t *testing.T) {
	for name, cfg := range map[string]BudgetConfig{
		"Capacity":      {Capacity: -1},
		"RetryCost":     {RetryCost: -1},
		"UnknownCost":   {UnknownCost: -1},
		"SuccessRefund": {SuccessRefund: -1},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := newRetryBudget(cfg)
			assert.Nil(t, b)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assert.NotErrorIs(t, err, ErrInvalidPolicy)
		})
	}
}

func TestBudgetDisabled(t *testing.T) {
	b, err := newRetryBudget(BudgetConfig{Disabled: true, Capacity: -1})
	require.NoError(t, err, "Disabled wins over the other fields")
	require.Nil(t, b)

	var nilB *retryBudget
	cl := &call{}
	for range 1000 {
		assert.True(t, nilB.take(cl, false))
		assert.True(t, nilB.take(cl, true))
	}
	assert.Equal(t, 0, cl.spent, "a nil budget charges nothing")
	assert.Equal(t, 0, nilB.tokens())
	assert.NotPanics(t, func() { nilB.succeeded(cl) })
}

func TestBudgetDrain(t *testing.T) {
	b := bgNew(t, bgSmall)
	cl := &call{}
	for i := range 4 {
		require.True(t, b.take(cl, false), "retry %d", i+1)
		assert.Equal(t, 20-5*(i+1), b.tokens())
		assert.Equal(t, 5*(i+1), cl.spent)
	}
	assert.False(t, b.take(cl, false), "empty bucket refuses")
	assert.False(t, b.take(&call{}, false), "for every call")
	assert.Equal(t, 0, b.tokens())
	assert.Equal(t, 20, cl.spent, "a refused take charges nothing")
}

func TestBudgetUnknownCost(t *testing.T) {
	b := bgNew(t, bgSmall)
	cl := &call{}
	require.True(t, b.take(cl, true))
	assert.Equal(t, 10, b.tokens())
	assert.Equal(t, 10, cl.spent)
	require.True(t, b.take(cl, false))
	assert.Equal(t, 5, b.tokens())
	assert.False(t, b.take(cl, true), "5 left cannot pay an unknown retry (10)")
	assert.Equal(t, 5, b.tokens())
	assert.True(t, b.take(cl, false), "but can pay a plain one (5)")
	assert.Equal(t, 0, b.tokens())
	assert.Equal(t, 20, cl.spent)
}

func TestBudgetSucceededRefund(t *testing.T) {
	t.Run("retries are refunded", func(t *testing.T) {
		b := bgNew(t, bgSmall)
		cl := &call{}
		require.True(t, b.take(cl, false))
		require.True(t, b.take(cl, true))
		require.Equal(t, 5, b.tokens())
		b.succeeded(cl)
		assert.Equal(t, 20, b.tokens())
		assert.Equal(t, 0, cl.spent, "spent is reset")
		b.succeeded(cl) // a second success of the same call is a first-attempt refund now
		assert.Equal(t, 20, b.tokens(), "capped at capacity")
	})

	t.Run("first-attempt success adds SuccessRefund", func(t *testing.T) {
		b := bgNew(t, bgSmall)
		require.True(t, b.take(&call{}, true))
		require.Equal(t, 10, b.tokens())
		b.succeeded(&call{})
		assert.Equal(t, 11, b.tokens())
	})

	t.Run("refund of spent is capped at capacity", func(t *testing.T) {
		b := bgNew(t, bgSmall)
		retried := &call{}
		require.True(t, b.take(retried, false)) // 15 left, 5 outstanding
		b.succeeded(&call{})                    // 16
		b.succeeded(&call{})                    // 17
		require.Equal(t, 17, b.tokens())
		b.succeeded(retried) // 17 + 5 = 22 -> 20
		assert.Equal(t, 20, b.tokens())
	})

	t.Run("full bucket stays full", func(t *testing.T) {
		b := bgNew(t, bgSmall)
		for range 10 {
			b.succeeded(&call{})
		}
		assert.Equal(t, 20, b.tokens())
	})

	t.Run("SuccessRefund is configurable", func(t *testing.T) {
		b := bgNew(t, BudgetConfig{Capacity: 20, RetryCost: 5, SuccessRefund: 3})
		for range 4 {
			require.True(t, b.take(&call{}, false))
		}
		b.succeeded(&call{})
		assert.Equal(t, 3, b.tokens())
	})
}

func TestBudgetRefillAfterOutage(t *testing.T) {
	b := bgNew(t, bgSmall)
	// The outage: every call retries until the bucket is empty and no call succeeds.
	for b.take(&call{}, false) {
	}
	require.Equal(t, 0, b.tokens())

	// Recovery: first-attempt successes put back one token each; a retry is allowed again
	// exactly when the bucket can pay its cost.
	for n := 1; n <= 20; n++ {
		b.succeeded(&call{})
		require.Equal(t, n, b.tokens())
		probe := bgNew(t, bgSmall) // same state, probed without spending the real bucket
		probe.available = n
		assert.Equal(t, n >= 5, probe.take(&call{}, false), "retry allowed with %d tokens", n)
		probe.available = n
		assert.Equal(t, n >= 10, probe.take(&call{}, true), "unknown retry allowed with %d tokens", n)
	}
	b.succeeded(&call{})
	assert.Equal(t, 20, b.tokens(), "never above capacity")

	// And the real bucket: drain, refill 4, refused; one more, allowed.
	for b.take(&call{}, false) {
	}
	require.Equal(t, 0, b.tokens())
	for range 4 {
		b.succeeded(&call{})
	}
	assert.False(t, b.take(&call{}, false))
	b.succeeded(&call{})
	assert.True(t, b.take(&call{}, false))
	assert.Equal(t, 0, b.tokens())
}

func TestBudgetConcurrent(t *testing.T) {
	const capacity = 100
	b := bgNew(t, BudgetConfig{Capacity: capacity, RetryCost: 5, UnknownCost: 10, SuccessRefund: 1})
	var violations atomic.Int64
	var granted atomic.Int64
	check := func() {
		if a := b.tokens(); a < 0 || a > capacity {
			violations.Add(1)
		}
	}
	var wg sync.WaitGroup
	for g := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 42))
			for range 400 {
				cl := &call{}
				for range r.IntN(4) {
					if b.take(cl, r.IntN(2) == 0) {
						granted.Add(1)
					}
					check()
				}
				if r.IntN(3) > 0 { // two calls in three succeed, the rest fail without refund
					b.succeeded(cl)
				}
				check()
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, violations.Load(), "available left [0, capacity]")
	assert.Positive(t, granted.Load())
	final := b.tokens()
	assert.GreaterOrEqual(t, final, 0)
	assert.LessOrEqual(t, final, capacity)
}

// The reclaimer's pre-check promises what a resend after an unknown outcome needs: with
// fewer tokens than that and the floor spent, it claims nothing (adversarial run: it
// claimed, asked the status endpoint, and was denied).
func TestResendPossibleCoversTheCostlierResend(t *testing.T) {
	b, err := newRetryBudget(BudgetConfig{Capacity: 7, RetryCost: 5, UnknownCost: 10})
	require.NoError(t, err)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cl := &call{}
	require.True(t, b.takeResend(cl, true, now), "the floor pays the first")
	assert.False(t, b.resendPossible(now), "7 tokens cannot pay an unknown outcome's 10, and the floor is spent")
	assert.False(t, b.takeResend(&call{}, true, now))
	assert.True(t, b.resendPossible(now.Add(resendFloor)), "the floor is due a second later")
}
