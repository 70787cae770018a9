package idemtemporal

import (
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/idemkit/idem"
)

// The types of the *temporal.ApplicationError values ActivityError returns. A workflow tells
// them apart with errors.As and ApplicationError.Type; the package documentation says what
// each means for the payment.
const (
	// TypeRetry: the payment may or may not have been made and idem will find out on the
	// next attempt, under the same key (retryable).
	TypeRetry = "IdemRetry"
	// TypeManual: a stored 5xx or an expired key; the record waits for Config.Lookup or
	// Client.Resolve (retryable after Config.ManualRetryDelay; a retry sends nothing).
	TypeManual = "IdemManual"
	// TypePermanent: the API refused the payment for good, a 4xx (non-retryable).
	TypePermanent = "IdemPermanent"
	// TypeKeyConflict: the key is bound to another request (non-retryable); says nothing of
	// the payment that holds it.
	TypeKeyConflict = "IdemKeyConflict"
	// TypeNotExecuted: the record was resolved as not executed (non-retryable); the
	// workflow may pay again in another step.
	TypeNotExecuted = "IdemNotExecuted"
	// TypeInvalid: the operation, policy or client is invalid (non-retryable).
	TypeInvalid = "IdemInvalid"
)

// DefaultManualRetryDelay is Config.ManualRetryDelay's default: how long Temporal waits
// before asking the keystore again about a manual record.
const DefaultManualRetryDelay = time.Hour

// Details are the details of every error ActivityError returns (decode them with
// ApplicationError.Details) and of every heartbeat Payer.Do records: which record to look
// at, in idemctl or with Client.Resolve.
type Details struct {
	Key    string `json:"key"`              // the idempotency key
	Scope  string `json:"scope,omitempty"`  // the record's tenant scope
	Intent string `json:"intent,omitempty"` // the step's intent (Step.Intent)
	Status int    `json:"status,omitempty"` // HTTP status of the last answer, 0 if none
	Reason string `json:"reason,omitempty"` // idem's sentinel, as text
}

// ActivityError turns an error of idem's Client.Do into the error an activity returns, as
// the package documentation describes: nil for nil, and otherwise a *temporal.ApplicationError
// of type TypeRetry, TypeManual, TypePermanent, TypeKeyConflict, TypeNotExecuted or
// TypeInvalid, wrapping err (errors.Is(err, idem.ErrPermanent) still matches) and carrying
// Details. manualDelay is the NextRetryDelay of a TypeManual error; 0 or less means
// DefaultManualRetryDelay.
func ActivityError(err error, manualDelay time.Duration) error {
	if err == nil {
		return nil
	}
	if manualDelay <= 0 {
		manualDelay = DefaultManualRetryDelay
	}
	d := Details{}
	var oe *idem.OperationError
	if errors.As(err, &oe) {
		d = Details{Key: oe.Key, Scope: oe.Scope, Intent: oe.Intent, Status: oe.LastStatusCode}
		if oe.Kind != nil {
			d.Reason = oe.Kind.Error()
		}
	}
	msg := err.Error()
	opt := func(typ string, nonRetryable bool, next time.Duration) error {
		return temporal.NewApplicationErrorWithOptions(msg, typ, temporal.ApplicationErrorOptions{
			NonRetryable: nonRetryable, Cause: err, Details: []any{d}, NextRetryDelay: next})
	}
	switch {
	// Invalid input first: nothing was persisted, and no retry can fix it.
	case errors.Is(err, idem.ErrInvalidOperation), errors.Is(err, idem.ErrInvalidPolicy),
		errors.Is(err, idem.ErrInvalidConfig):
		return opt(TypeInvalid, true, 0)
	// A manual record before ErrOutcomeUnknown, which a stored 5xx also matches.
	case errors.Is(err, idem.ErrStoredServerError), errors.Is(err, idem.ErrKeyExpired):
		return opt(TypeManual, false, manualDelay)
	case errors.Is(err, idem.ErrNotExecuted):
		return opt(TypeNotExecuted, true, 0)
	// A refusal the keystore could not record is ErrOutcomeUnknown too: the record may
	// still be pending and be sent again, so it is retried, never declared failed.
	case errors.Is(err, idem.ErrOutcomeUnknown):
		return opt(TypeRetry, false, retryAfter(oe))
	case errors.Is(err, idem.ErrPermanent):
		return opt(TypePermanent, true, 0)
	case errors.Is(err, idem.ErrKeyConflict):
		return opt(TypeKeyConflict, true, 0)
	}
	// ErrExhausted, ErrRetryAfterTooLong, ErrDeadline, ErrBudgetExhausted, ErrCanceled,
	// ErrLeaseLost, ErrClockSkew, a store failing before the send: the record is pending
	// (or was never written) and the next attempt continues it under the same key.
	return opt(TypeRetry, false, retryAfter(oe))
}

// retryAfter is the wait the server asked for when that stopped the call (idem refuses to
// sleep past Policy.MaxRetryAfter): Temporal's durable timer waits it out instead. 0 leaves
// the activity's retry policy to decide.
func retryAfter(oe *idem.OperationError) time.Duration {
	if oe == nil || oe.RetryAfter <= 0 {
		return 0
	}
	return oe.RetryAfter
}
