package keystore

// Reasons of records that wait for, or went through, business reconciliation
// (Record.Reason). Tools that list records (an admin page, a report) match on them.
const (
	// ReasonStoredServerError: the server stored a 5xx for the key (idem.ErrStoredServerError);
	// the record is manual, with the stored answer in Record.Response.
	ReasonStoredServerError = "stored_server_error"
	// ReasonExecuted: a manual record was resolved as executed (idem.Config.Lookup or
	// idem.Client.Resolve); the record is succeeded with the answer found. Record.Note says who.
	ReasonExecuted = "executed"
	// ReasonNotExecuted: a manual record was resolved as not executed; the record is failed
	// and idem's Do returns idem.ErrNotExecuted. Record.Note says who.
	ReasonNotExecuted = "not_executed"
	// ReasonWithdrawn: the keystore reported an error creating the record and nothing was
	// sent; Do withdrew it (failed, Record.NotExecuted). Not a verdict on the payment: a
	// later Do of its intent sends it under its key, so never start a new intent for it. A
	// withdrawn record without an intent stays failed, and Do of it returns ErrNotExecuted.
	ReasonWithdrawn = "withdrawn"
)
