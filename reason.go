package idem

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
}

func reasonKind(reason string) error {
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
