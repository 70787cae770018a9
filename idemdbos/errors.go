package idemdbos

import (
	"encoding/gob"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
)

// Kind says what became of a payment that did not succeed; see the package documentation.
type Kind string

// The kinds of Error.
const (
	KindRetry       Kind = "retry"        // unknown or not yet sent: retry under the same key
	KindManual      Kind = "manual"       // a stored 5xx or an expired key: Resolve, then DoAs
	KindPermanent   Kind = "permanent"    // a 4xx: the payment was refused
	KindKeyConflict Kind = "key_conflict" // the key is bound to another request
	KindNotExecuted Kind = "not_executed" // resolved as not executed: pay again in another step
	KindInvalid     Kind = "invalid"      // the operation, policy or client is invalid
)

func init() {
	// DBOS stores a step's Go error gob-encoded, keeping its type for replays.
	gob.Register(&Error{})
}

// Error is the error of a payment step that did not succeed. Its fields are exported and
// plain so that it survives DBOS's checkpoint: a replayed step returns an equal *Error,
// which still matches idem's sentinels with errors.Is (Is maps the Kind back to them).
type Error struct {
	Kind    Kind   // what became of the payment
	Step    Step   // the step whose key the payment holds: give it to Payer.DoAs
	Key     string // the idempotency key
	Scope   string // the record's tenant scope
	Status  int    // HTTP status of the last answer, 0 if none
	Message string // idem's error, as text
	cause   error  // idem's error; not kept by a checkpoint
}

// Error returns "idemdbos: <kind> (step <workflow>/<step>): <idem's message>".
func (e *Error) Error() string {
	return fmt.Sprintf("idemdbos: %s (step %s/%d): %s", e.Kind, e.Step.WorkflowID, e.Step.StepID, e.Message)
}

// Unwrap returns idem's error, or nil for an Error read back from a checkpoint.
func (e *Error) Unwrap() error { return e.cause }

// Is matches idem's sentinel for the Kind, also on an Error read back from a checkpoint:
// KindPermanent idem.ErrPermanent, KindKeyConflict idem.ErrKeyConflict, KindNotExecuted
// idem.ErrNotExecuted, KindManual and KindRetry idem.ErrOutcomeUnknown, KindInvalid
// idem.ErrInvalidOperation.
func (e *Error) Is(target error) bool {
	switch e.Kind {
	case KindPermanent:
		return target == idem.ErrPermanent
	case KindKeyConflict:
		return target == idem.ErrKeyConflict
	case KindNotExecuted:
		return target == idem.ErrNotExecuted
	case KindManual, KindRetry:
		return target == idem.ErrOutcomeUnknown
	case KindInvalid:
		return target == idem.ErrInvalidOperation
	}
	return false
}

// Retryable reports whether DBOS should run the step again: true only for an *Error of
// KindRetry. Give it to dbos.WithStepRetryPredicate.
func Retryable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == KindRetry
}

// kindOf classifies an error of idem's Client.Do.
func kindOf(err error) Kind {
	switch {
	case errors.Is(err, idem.ErrInvalidOperation), errors.Is(err, idem.ErrInvalidPolicy),
		errors.Is(err, idem.ErrInvalidConfig):
		return KindInvalid
	// A manual record before ErrOutcomeUnknown, which a stored 5xx also matches.
	case errors.Is(err, idem.ErrStoredServerError), errors.Is(err, idem.ErrKeyExpired):
		return KindManual
	case errors.Is(err, idem.ErrNotExecuted):
		return KindNotExecuted
	// A refusal the keystore could not record is ErrOutcomeUnknown: the record may still
	// be pending and be sent again, so it is retried, never declared failed.
	case errors.Is(err, idem.ErrOutcomeUnknown):
		return KindRetry
	case errors.Is(err, idem.ErrPermanent):
		return KindPermanent
	case errors.Is(err, idem.ErrKeyConflict):
		return KindKeyConflict
	}
	// ErrExhausted, ErrRetryAfterTooLong, ErrDeadline, ErrBudgetExhausted, ErrCanceled,
	// ErrLeaseLost, ErrClockSkew, a store failing before the send: the record is pending
	// (or was never written); the next run continues it under the same key.
	return KindRetry
}

// StepError turns an error of idem's Client.Do for step into an *Error (nil for nil).
func StepError(step Step, err error) error {
	if err == nil {
		return nil
	}
	e := &Error{Kind: kindOf(err), Step: step, Key: step.Key(), Message: err.Error(), cause: err}
	var oe *idem.OperationError
	if errors.As(err, &oe) {
		e.Key, e.Scope, e.Status = oe.Key, oe.Scope, oe.LastStatusCode
	}
	return e
}
