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
	// reasonCancelRequested: a manual record whose cancel by reference the provider accepted
	// (an Async route's 2xx) and will report on by an event; Do returns the stored error, and
	// no second cancel is sent.
	reasonCancelRequested = "cancel_requested"
)

// Reasons of records that wait for, or went through, business reconciliation
// (keystore.Record.Reason). Tools that list records (an admin page, a report) match on them.
const (
	// ReasonStoredServerError: the server stored a 5xx for the key (ErrStoredServerError);
	// the record is manual, with the stored answer in Record.Response.
	ReasonStoredServerError = "stored_server_error"
	// ReasonExecuted: a manual record was resolved as executed (Config.Lookup or
	// Client.Resolve); the record is succeeded with the answer found. Record.Note says who.
	ReasonExecuted = "executed"
	// ReasonNotExecuted: a manual record was resolved as not executed; the record is failed
	// and Do returns ErrNotExecuted. Record.Note says who.
	ReasonNotExecuted = "not_executed"
	// ReasonWithdrawn: the keystore reported an error creating the record and nothing was
	// sent; Do withdrew it (failed, Record.NotExecuted). Not a verdict on the payment: a
	// later Do of its intent sends it under its key, so never start a new intent for it. A
	// withdrawn record without an intent stays failed, and Do of it returns ErrNotExecuted.
	ReasonWithdrawn = "withdrawn"
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

	ReasonStoredServerError: ErrStoredServerError,
	ReasonNotExecuted:       ErrNotExecuted,
}

func reasonKind(reason string) error {
	if reason == ReasonWithdrawn { // not in reasonKinds: kindReason(ErrNotExecuted) is ReasonNotExecuted
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
