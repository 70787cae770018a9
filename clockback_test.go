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
		cfg.KeyStatusFunc = func(context.Context, KeyStatusRequest) (KeyStatus, error) {
			if !forgot.Load() {
				return KeyStatus{}, errors.New("status endpoint unavailable")
			}
			return KeyStatus{State: KeyStatusNotFound}, nil // past the server's retention
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
