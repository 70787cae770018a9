package idem

import "github.com/idemkit/idem/keystore"

// Persisted stop reasons (keystore.Record.Reason), so that a later Do of a finished key
// returns the same kind of error the first call did.
const (
	reasonPermanent   = "permanent"
	reasonKeyConflict = "key_conflict"
	reasonKeyExpired  = "key_expired"
	reasonExhausted   = "exhausted"
	reasonRetryAfter  = "retry_after_too_long"
	reasonDeadline    = "deadline"
	reasonBudget      = "budget_exhausted"
	reasonUnknown     = "outcome_unknown"
	reasonCanceled    = "canceled"
	reasonInvalid     = "invalid_operation"
	// reasonCancelRequested: a manual record whose cancel by reference the provider accepted
	// (an Async route's 2xx) and will report on by an event; Do returns the stored error, and
	// no second cancel is sent.
	reasonCancelRequested = "cancel_requested"
)

var reasonKinds = map[string]error{
	reasonPermanent:   ErrPermanent,
	reasonKeyConflict: ErrKeyConflict,
	reasonKeyExpired:  ErrKeyExpired,
	reasonExhausted:   ErrExhausted,
	reasonRetryAfter:  ErrRetryAfterTooLong,
	reasonDeadline:    ErrDeadline,
	reasonBudget:      ErrBudgetExhausted,
	reasonUnknown:     ErrOutcomeUnknown,
	reasonCanceled:    ErrCanceled,
	reasonInvalid:     ErrInvalidOperation,

	keystore.ReasonStoredServerError: ErrStoredServerError,
	keystore.ReasonNotExecuted:       ErrNotExecuted,
}

func reasonKind(reason string) error {
	if reason == keystore.ReasonWithdrawn { // not in reasonKinds: kindReason(ErrNotExecuted) is ReasonNotExecuted
		return ErrNotExecuted
	}
	if reason == reasonCancelRequested { // likewise for ErrStoredServerError
		return ErrStoredServerError
	}
	if k, ok := reasonKinds[reason]; ok {
		return k
	}
	return ErrPermanent
}

func kindReason(kind error) string {
	for r, k := range reasonKinds {
		if k == kind {
			return r
		}
	}
	return reasonUnknown
}
