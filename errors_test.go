package idem

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var allSentinels = []error{
	ErrOutcomeUnknown, ErrExhausted, ErrKeyConflict, ErrPermanent, ErrRetryAfterTooLong,
	ErrDeadline, ErrBudgetExhausted, ErrKeyExpired, ErrCanceled, ErrInvalidOperation,
	ErrInvalidPolicy, ErrInvalidConfig,
}

func TestOperationErrorText(t *testing.T) {
	tests := []struct {
		name string
		err  *OperationError
		want string
	}{
		{"minimal", &OperationError{Kind: ErrExhausted, Key: "k1", Attempts: 5},
			`idem: retries exhausted (key "k1", 5 attempt(s))`},
		{"last status", &OperationError{Kind: ErrPermanent, Key: "k1", Attempts: 1, LastStatusCode: 402},
			`idem: permanent failure (key "k1", 1 attempt(s), last status 402)`},
		{"intent, retry-after, cause", &OperationError{Kind: ErrRetryAfterTooLong, Key: "k2", Intent: "order-7",
			Attempts: 2, LastStatusCode: 503, RetryAfter: 90 * time.Second, Cause: errors.New("boom")},
			`idem: Retry-After beyond the allowed wait (key "k2", intent "order-7", 2 attempt(s), last status 503, server asked to wait 1m30s): boom`},
		{"unknown flag on another kind", &OperationError{Kind: ErrBudgetExhausted, Key: "k3", Attempts: 1, Unknown: true},
			`idem: retry budget exhausted (key "k3", 1 attempt(s)); outcome unknown`},
		{"unknown kind is not repeated", &OperationError{Kind: ErrOutcomeUnknown, Key: "k4", Attempts: 3, LastStatusCode: 502, Unknown: true},
			`idem: outcome unknown (key "k4", 3 attempt(s), last status 502)`},
		{"key is quoted", &OperationError{Kind: ErrKeyConflict, Key: `a"b`, Attempts: 0},
			`idem: idempotency key reused with another request (key "a\"b", 0 attempt(s))`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.err.Error())
		})
	}
}

func TestOperationErrorIs(t *testing.T) {
	for _, kind := range allSentinels {
		for _, unknown := range []bool{false, true} {
			err := error(&OperationError{Kind: kind, Key: "k", Unknown: unknown})
			for _, target := range allSentinels {
				want := target == kind || (unknown && target == ErrOutcomeUnknown)
				assert.Equal(t, want, errors.Is(err, target), "Kind %v, Unknown %v, target %v", kind, unknown, target)
			}
			// Through a wrapper too.
			wrapped := fmt.Errorf("charging order: %w", err)
			assert.ErrorIs(t, wrapped, kind)
			assert.Equal(t, unknown || kind == ErrOutcomeUnknown, errors.Is(wrapped, ErrOutcomeUnknown))
		}
	}
}

func TestOperationErrorUnwrapsCause(t *testing.T) {
	err := error(&OperationError{Kind: ErrCanceled, Key: "k", Cause: context.Canceled})
	assert.ErrorIs(t, err, ErrCanceled)
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, context.DeadlineExceeded)

	deadline := error(&OperationError{Kind: ErrCanceled, Key: "k", Cause: fmt.Errorf("attempt 2: %w", context.DeadlineExceeded)})
	assert.ErrorIs(t, deadline, context.DeadlineExceeded)

	var opErr *net.OpError
	netErr := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	transport := error(&OperationError{Kind: ErrOutcomeUnknown, Unknown: true, Key: "k", Cause: netErr})
	require.ErrorAs(t, transport, &opErr)
	assert.Same(t, netErr, opErr)
	assert.ErrorIs(t, transport, syscall.ECONNRESET)

	noCause := &OperationError{Kind: ErrExhausted, Key: "k"}
	assert.Nil(t, noCause.Unwrap())
	assert.NotErrorIs(t, noCause, io.EOF)
}

func TestOperationErrorAs(t *testing.T) {
	orig := &OperationError{Kind: ErrPermanent, Key: "k9", Attempts: 1, LastStatusCode: 400,
		Response: &Result{Key: "k9", StatusCode: 400, Body: []byte(`{"error":"bad"}`)}}
	wrapped := fmt.Errorf("service: %w", fmt.Errorf("handler: %w", orig))

	var got *OperationError
	require.ErrorAs(t, wrapped, &got)
	assert.Same(t, orig, got)
	assert.Equal(t, "k9", got.Key)
	assert.Equal(t, 400, got.Response.StatusCode)

	assert.False(t, errors.As(fmt.Errorf("plain: %w", io.EOF), &got))
}

func TestSentinelsAreDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range allSentinels {
		require.NotNil(t, s)
		assert.False(t, seen[s.Error()], "duplicate text %q", s.Error())
		seen[s.Error()] = true
		for _, o := range allSentinels {
			if o != s {
				assert.NotErrorIs(t, s, o)
			}
		}
	}
}

func TestReasonKindRoundTrip(t *testing.T) {
	require.Len(t, reasonKinds, 12)
	kinds := map[error]string{}
	for reason, kind := range reasonKinds {
		if other, dup := kinds[kind]; dup {
			t.Fatalf("kind %v has two reasons %q and %q: kindReason would be random", kind, other, reason)
		}
		kinds[kind] = reason
		assert.Equal(t, kind, reasonKind(reason), reason)
		assert.Equal(t, reason, kindReason(kind), kind.Error())
	}
	for _, k := range []error{ErrPermanent, ErrKeyConflict, ErrKeyExpired, ErrExhausted, ErrRetryAfterTooLong,
		ErrDeadline, ErrBudgetExhausted, ErrOutcomeUnknown, ErrCanceled, ErrStoredServerError, ErrNotExecuted} {
		_, ok := kinds[k]
		assert.True(t, ok, "stop kind %v has a persisted reason", k)
	}

	// The persisted strings are a storage format: they must not change.
	assert.Equal(t, map[string]error{
		"permanent":            ErrPermanent,
		"key_conflict":         ErrKeyConflict,
		"key_expired":          ErrKeyExpired,
		"exhausted":            ErrExhausted,
		"retry_after_too_long": ErrRetryAfterTooLong,
		"deadline":             ErrDeadline,
		"budget_exhausted":     ErrBudgetExhausted,
		"outcome_unknown":      ErrOutcomeUnknown,
		"canceled":             ErrCanceled,
		"invalid_operation":    ErrInvalidOperation,
		"stored_server_error":  ErrStoredServerError,
		"not_executed":         ErrNotExecuted,
	}, reasonKinds)

	// Unrecognised values.
	assert.Equal(t, ErrPermanent, reasonKind(""))
	assert.Equal(t, ErrPermanent, reasonKind("something_new"))
	assert.Equal(t, reasonUnknown, kindReason(nil))
	assert.Equal(t, reasonUnknown, kindReason(io.EOF))
}
