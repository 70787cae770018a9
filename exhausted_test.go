package idem

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemkit/idem/outcome"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ErrExhausted says what the last attempt got: "3 of 3 attempts used" alone did not tell an
// API that refused connections from one that answered 503 (newcomer run). The transport error
// is text, not wrapped: an attempt's own timeout must not match the caller's deadline.
func TestExhaustedNamesTheLastOutcome(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close() // connections refused
	busy := newLedgerAPI(t, unavailable503("0"))
	for _, tc := range []struct {
		name, base, want string
	}{
		{"connection refused", down.URL, "2 of 2 attempts used; the last failed: "},
		{"503", busy.srv.URL, "2 of 2 attempts used; the last got HTTP 503"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := ledgerClient(t, busy, func(cfg *Config) {
				cfg.BaseURL, cfg.KeyStatusURL = tc.base, ""
				cfg.Policy = Policy{MaxAttempts: 2}
			})
			_, err := c.Do(context.Background(), payment(1, "order-x"))
			require.ErrorIs(t, err, ErrExhausted)
			assert.Contains(t, err.Error(), tc.want)
			if tc.name == "connection refused" {
				assert.Contains(t, err.Error(), "connection refused")
			}
			assert.NotErrorIs(t, err, context.DeadlineExceeded)
		})
	}
}

// A call that ran out of status checks said only "status endpoint gave no final answer in 5
// checks": nothing about the attempt whose outcome was unknown (newcomer run, an attempt
// timeout). The message names it, or says an earlier call may have sent the key.
func TestStatusChecksRunOutNamesWhyTheOutcomeIsUnknown(t *testing.T) {
	a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, _ int64) {
		panic(http.ErrAbortHandler) // no answer
	})
	c, _ := ledgerClient(t, a, func(cfg *Config) {
		cfg.Policy = Policy{MaxAttempts: 3, MaxKeyStatusChecks: 2}
		cfg.KeyStatusFunc = func(context.Context, outcome.KeyStatusRequest) (outcome.KeyStatus, error) {
			return outcome.KeyStatus{State: outcome.KeyStatusUnknown}, nil // no usable answer
		}
	})
	op := payment(1, "order-s", WithIntent("order-s"))
	_, err := c.Do(context.Background(), op)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	assert.Contains(t, err.Error(), "status endpoint gave no final answer in 2 checks (the last gave no usable answer); attempt 1 failed: ")
	_, err = c.Do(context.Background(), op) // resumed: no attempt of its own before the checks
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	assert.Contains(t, err.Error(), "status endpoint gave no final answer in 2 checks (the last gave no usable answer); an earlier call or process may have sent the key")
}

// When the checks themselves fail (the API is down), the message carries the last check's
// error, so that an operator tells "down" from an answer that settles nothing. (A server
// that says "executing" at every check gets the key resent instead: see statuscheck.go.)
func TestStatusChecksRunOutNameTheLastCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   outcome.KeyStatus
		err  error
		want string
	}{
		{"down", outcome.KeyStatus{}, errors.New("dial tcp 127.0.0.1:1: connect: connection refused"),
			"status endpoint gave no final answer in 2 checks (the last failed: dial tcp 127.0.0.1:1: connect: connection refused)"},
		{"redirect", outcome.KeyStatus{State: outcome.KeyStatusCompleted, ResponseStatusCode: 102}, nil,
			"status endpoint gave no final answer in 2 checks (the last reported HTTP 102, which settles nothing)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, _ int64) {
				panic(http.ErrAbortHandler) // no answer
			})
			checks := 0
			c, _ := ledgerClient(t, a, func(cfg *Config) {
				cfg.Policy = Policy{MaxAttempts: 3, MaxKeyStatusChecks: 2, MaxElapsed: time.Hour}
				cfg.KeyStatusFunc = func(context.Context, outcome.KeyStatusRequest) (outcome.KeyStatus, error) {
					checks++
					return tc.st, tc.err
				}
			})
			_, err := c.Do(context.Background(), payment(1, "order-"+tc.name, WithIntent("order-"+tc.name)))
			require.ErrorIs(t, err, ErrOutcomeUnknown)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, 2, checks)
		})
	}
}
