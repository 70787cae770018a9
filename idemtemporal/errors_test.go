package idemtemporal_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtemporal"
)

func TestActivityError(t *testing.T) {
	op := func(kind error, unknown bool) error {
		return &idem.OperationError{Key: "k-1", Scope: "t", Intent: "temporal:x", LastStatusCode: 503,
			Kind: kind, Unknown: unknown}
	}
	tooLong := &idem.OperationError{Key: "k-1", Kind: idem.ErrRetryAfterTooLong, RetryAfter: 90 * time.Second}
	cases := []struct {
		name         string
		err          error
		typ          string
		nonRetryable bool
		next         time.Duration
	}{
		{"unknown", op(idem.ErrOutcomeUnknown, true), idemtemporal.TypeRetry, false, 0},
		{"exhausted after a timeout", op(idem.ErrExhausted, true), idemtemporal.TypeRetry, false, 0},
		{"budget", op(idem.ErrBudgetExhausted, false), idemtemporal.TypeRetry, false, 0},
		{"canceled", op(idem.ErrCanceled, true), idemtemporal.TypeRetry, false, 0},
		{"lease lost", op(idem.ErrLeaseLost, true), idemtemporal.TypeRetry, false, 0},
		{"retry-after too long", tooLong, idemtemporal.TypeRetry, false, 90 * time.Second},
		{"store down before the send", fmt.Errorf("create: %w", errors.New("store closed")), idemtemporal.TypeRetry, false, 0},
		{"permanent", op(idem.ErrPermanent, false), idemtemporal.TypePermanent, true, 0},
		// A refusal the store could not record: the record may still be pending.
		{"permanent but unrecorded", op(idem.ErrPermanent, true), idemtemporal.TypeRetry, false, 0},
		{"key reuse", op(idem.ErrKeyConflict, false), idemtemporal.TypeKeyConflict, true, 0},
		{"not executed", op(idem.ErrNotExecuted, false), idemtemporal.TypeNotExecuted, true, 0},
		{"stored 5xx", op(idem.ErrStoredServerError, true), idemtemporal.TypeManual, false, time.Hour},
		{"key expired", op(idem.ErrKeyExpired, true), idemtemporal.TypeManual, false, time.Hour},
		{"invalid", fmt.Errorf("%w: bad url", idem.ErrInvalidOperation), idemtemporal.TypeInvalid, true, 0},
		{"invalid policy", fmt.Errorf("%w: x", idem.ErrInvalidPolicy), idemtemporal.TypeInvalid, true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := idemtemporal.ActivityError(tc.err, 0)
			var app *temporal.ApplicationError
			require.ErrorAs(t, err, &app)
			assert.Equal(t, tc.typ, app.Type())
			assert.Equal(t, tc.nonRetryable, app.NonRetryable())
			assert.Equal(t, tc.next, app.NextRetryDelay())
			assert.ErrorIs(t, err, tc.err, "idem's error stays reachable")
			var d idemtemporal.Details
			require.NoError(t, app.Details(&d))
			var oe *idem.OperationError
			if errors.As(tc.err, &oe) {
				assert.Equal(t, idemtemporal.Details{Key: "k-1", Scope: oe.Scope, Intent: oe.Intent,
					Status: oe.LastStatusCode, Reason: oe.Kind.Error()}, d)
			} else {
				assert.Equal(t, idemtemporal.Details{}, d)
			}
		})
	}
	assert.NoError(t, idemtemporal.ActivityError(nil, 0))
	var app *temporal.ApplicationError
	require.ErrorAs(t, idemtemporal.ActivityError(op(idem.ErrStoredServerError, true), 5*time.Minute), &app)
	assert.Equal(t, 5*time.Minute, app.NextRetryDelay())
}

// Do outside an activity is refused, not a panic.
func TestDoOutsideActivity(t *testing.T) {
	c, err := idem.NewClient(idem.Config{BaseURL: "http://127.0.0.1:1"})
	require.NoError(t, err)
	defer c.Close()
	p, err := idemtemporal.New(idemtemporal.Config{Client: c})
	require.NoError(t, err)
	_, err = p.Do(context.Background(), "POST", "/v1/payments", nil, nil)
	var app *temporal.ApplicationError
	require.ErrorAs(t, err, &app)
	assert.Equal(t, idemtemporal.TypeInvalid, app.Type())
	assert.ErrorIs(t, err, idem.ErrInvalidOperation)
}
