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
)

// scripted serves the statuses in order (then 201) with the given Retry-After, and counts.
type scripted struct {
	codes      []int
	retryAfter string
	n          atomic.Int64
	keys       chan string
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i := int(s.n.Add(1)) - 1
	if s.keys != nil {
		s.keys <- r.Header.Get("Idempotency-Key")
	}
	if s.retryAfter != "" {
		w.Header().Set("Retry-After", s.retryAfter)
	}
	if i < len(s.codes) {
		w.WriteHeader(s.codes[i])
		return
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(`{"ok":true}`))
}

func scriptedClient(t *testing.T, h http.Handler, mod func(*Config)) (*Client, *fakeClock, keystore.Store) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	clock := newFakeClock()
	store := keystore.NewMemory()
	cfg := Config{BaseURL: srv.URL, Store: store, Now: clock.Now, Sleep: clock.Sleep, Budget: BudgetConfig{Disabled: true}}
	if mod != nil {
		mod(&cfg)
	}
	c, err := NewClient(cfg)
	require.NoError(t, err)
	return c, clock, store
}

func TestBackoffDelaysWithinBounds(t *testing.T) {
	h := &scripted{codes: []int{503, 503, 503, 503, 503}}
	c, clock, _ := scriptedClient(t, h, nil)
	const (
		initial = 100 * time.Millisecond
		jitter  = 0.5
		ceiling = 450 * time.Millisecond
	)
	res, err := c.Do(context.Background(), payment(1, "b"), CallMaxAttempts(6), CallBackoff(initial, 2, jitter, ceiling))
	require.NoError(t, err)
	assert.Equal(t, 6, res.Attempts)
	sleeps := clock.Sleeps()
	require.Len(t, sleeps, 5)
	// cenkalti/backoff caps the interval at the ceiling before jitter; idem caps again after.
	base := initial
	for i, d := range sleeps {
		b := min(base, ceiling)
		lo := time.Duration(float64(b) * (1 - jitter))
		hi := min(time.Duration(float64(b)*(1+jitter)), ceiling)
		assert.GreaterOrEqual(t, d, lo, "delay %d", i)
		assert.LessOrEqual(t, d, hi, "delay %d: the ceiling holds after jitter", i)
		base *= 2
	}
}

func TestRetryAfterBeyondCapStopsAtOnce(t *testing.T) {
	for name, tc := range map[string]struct {
		value string
		want  time.Duration
	}{
		"an hour":        {"3600", time.Hour},
		"20 digits":      {"99999999999999999999", 100 * 365 * 24 * 3600 * time.Second}, // outcome.ParseRetryAfter saturates at 100 years,
		"date next year": {time.Now().Add(365 * 24 * time.Hour).UTC().Format(http.TimeFormat), 0},
	} {
		t.Run(name, func(t *testing.T) {
			h := &scripted{codes: []int{503}, retryAfter: tc.value}
			c, clock, store := scriptedClient(t, h, nil)
			op := payment(1, "ra")
			_, err := c.Do(context.Background(), op)
			require.ErrorIs(t, err, ErrRetryAfterTooLong)
			oe := opErr(t, err)
			if tc.want > 0 {
				assert.Equal(t, tc.want, oe.RetryAfter)
			} else {
				assert.Greater(t, oe.RetryAfter, 300*24*time.Hour)
			}
			assert.Equal(t, 1, oe.Attempts)
			assert.Empty(t, clock.Sleeps(), "no sleeping for hours")
			rec, err := store.Get(context.Background(), "", op.Key())
			require.NoError(t, err)
			assert.Equal(t, keystore.StatePending, rec.State, "stays reconcilable")
		})
	}
}

// Garbage, negative and past Retry-After values fall back to backoff.
func TestRetryAfterFallbacks(t *testing.T) {
	past := time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	for _, v := range []string{"-5", "soon", "1.5", past} {
		t.Run(v, func(t *testing.T) {
			h := &scripted{codes: []int{503}, retryAfter: v}
			c, clock, _ := scriptedClient(t, h, nil)
			_, err := c.Do(context.Background(), payment(1, "x"), CallBackoff(40*time.Millisecond, 2, 0.25, time.Second))
			require.NoError(t, err)
			sleeps := clock.Sleeps()
			require.Len(t, sleeps, 1)
			assert.InDelta(t, float64(40*time.Millisecond), float64(sleeps[0]), float64(10*time.Millisecond))
		})
	}
}

func TestNeverWaitsPastContextDeadline(t *testing.T) {
	h := &scripted{codes: []int{503}, retryAfter: "5"}
	c, clock, _ := scriptedClient(t, h, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := c.Do(ctx, payment(1, "dl"))
	require.ErrorIs(t, err, ErrDeadline)
	assert.Equal(t, 5*time.Second, opErr(t, err).RetryAfter)
	assert.Empty(t, clock.Sleeps(), "returns at once: no wait at all")
	assert.NoError(t, ctx.Err(), "returned before the deadline")
}

func TestMaxElapsedBoundsTheCall(t *testing.T) {
	h := &scripted{codes: []int{503, 503, 503, 503, 503, 503, 503, 503}}
	c, clock, _ := scriptedClient(t, h, nil)
	_, err := c.Do(context.Background(), payment(1, "el"), CallMaxAttempts(10),
		CallMaxElapsed(time.Second), CallBackoff(300*time.Millisecond, 1, 0, time.Second))
	require.ErrorIs(t, err, ErrExhausted)
	// 300ms waits: three fit in one second, the fourth would end at 1.2s.
	assert.Equal(t, []time.Duration{300 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond}, clock.Sleeps())
	assert.Equal(t, 4, opErr(t, err).Attempts)
	assert.False(t, opErr(t, err).Unknown, "503 means not executed")
}

func TestMaxAttemptsIsExact(t *testing.T) {
	h := &scripted{codes: []int{503, 503, 503, 503, 503, 503}}
	c, _, _ := scriptedClient(t, h, nil)
	_, err := c.Do(context.Background(), payment(1, "max"), CallMaxAttempts(3), CallBackoff(time.Millisecond, 1, 0, time.Millisecond))
	require.ErrorIs(t, err, ErrExhausted)
	assert.Equal(t, 3, opErr(t, err).Attempts)
	assert.Equal(t, int64(3), h.n.Load())
}

// A cancelled context interrupts a wait at once, with the real clock.
func TestCancelInterruptsWait(t *testing.T) {
	h := &scripted{codes: []int{503}, retryAfter: "20"}
	srv := httptest.NewServer(h)
	defer srv.Close()
	c, err := NewClient(Config{BaseURL: srv.URL, Budget: BudgetConfig{Disabled: true}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err = c.Do(ctx, payment(1, "cancel"))
	require.ErrorIs(t, err, ErrCanceled)
	require.True(t, errors.Is(err, context.Canceled))
	assert.Less(t, time.Since(start), 2*time.Second)
}
