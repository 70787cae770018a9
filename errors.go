package idem

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors. Once an operation is valid, every error Do and Recover return for it is an
// *OperationError that matches one of these with errors.Is; several may match at once (a call
// stopped by the retry budget after a timeout matches both ErrBudgetExhausted and
// ErrOutcomeUnknown). Invalid input (ErrInvalidOperation, ErrInvalidPolicy, ErrInvalidConfig)
// is reported before anything is persisted, as a plain wrapped error; so is a keystore that
// fails before the first send (reading or creating the record: the store's own error, such
// as keystore.ErrClosed, wrapped), when nothing was sent and the call may simply be retried
// (see Do for a Create that reported an error but committed).
var (
	// ErrOutcomeUnknown: a request may have reached the server and idem could not learn
	// whether it was executed. The record stays pending (Do again with the same operation, or
	// Client.Recover, reconciles it), or manual when the key can tell no more
	// (ErrStoredServerError, ErrKeyExpired). Never treat it as "failed", never pay again under
	// a new key because of it. It is also what a refusal becomes when the keystore cannot
	// record the failure (OperationError.Response holds the refusal): the record may still be
	// pending and be sent again.
	ErrOutcomeUnknown = errors.New("idem: outcome unknown")
	// ErrStoredServerError: the server stored a 5xx as this key's answer (replayed with
	// Idempotent-Replayed: true, reported by the status endpoint as completed with a 5xx, or a
	// 5xx with a "do not retry" hint), or a 3xx (a redirect, which says nothing of the effect). Execution began and its effect is unknown; the key can
	// never tell more, so it is never resent. Always matched together with ErrOutcomeUnknown.
	// OperationError.Response holds the stored answer; the record is manual with Reason
	// keystore.ReasonStoredServerError until a business lookup (Config.Lookup) or Client.Resolve
	// settles it. Stripe documents this behaviour ("Idempotent requests": results, 500 errors
	// included, are saved for the key once execution began).
	ErrStoredServerError = errors.New("idem: server stored an error for the key; effect unknown")
	// ErrNotExecuted: the record was resolved as not executed (Config.Lookup found no trace
	// of the intent, or Client.Resolve was told so). Only now may the application start a new
	// intent for the same business payment (a new intent name, hence a new key). The record is
	// failed with Reason keystore.ReasonNotExecuted. The verdict reaches the application more than once
	// (from Do, from Recover's handle, from every later Do of the intent): derive the new
	// intent's name from the old one and a try number ("order-42#2"), so that each copy of the
	// verdict starts the same new intent, never two.
	ErrNotExecuted = errors.New("idem: intent resolved as not executed")
	// ErrNotManual: Client.Resolve was asked to settle a record that is not waiting for
	// reconciliation (not StateManual). Nothing is written.
	ErrNotManual = errors.New("idem: record is not waiting for reconciliation")
	// ErrCancelInFlight: Client.Resolve (a person, a webhook) was asked to settle a manual
	// record while a cancel by reference (profile.CancelByReference) sent for it may still
	// land: until the cancel's claim on the record ends and its Route.Landing has passed. A
	// verdict then could be voided by the cancel (an "executed" payment canceled after it was
	// reported paid) or let the order be paid again under a new intent that the cancel then
	// voids. Nothing is written; give the verdict again later (a webhook answers 409 so that
	// the provider delivers the event again).
	ErrCancelInFlight = errors.New("idem: a cancel by reference sent for the record may still land")
	// ErrExhausted: the policy's MaxAttempts or MaxElapsed ran out. The record stays pending.
	ErrExhausted = errors.New("idem: retries exhausted")
	// ErrKeyConflict: the idempotency key is already bound to another request: refused
	// locally before sending (the method, URL or body differ from the record's; the error
	// says which), or answered by the server with 422 (IETF
	// Idempotency-Key draft §2.7) or a 400 naming key reuse (Stripe's idempotency_error);
	// this request was not executed under this payload. It is not the outcome of the
	// payment: the request that holds the key or intent (an earlier one of the same intent,
	// sent with other bytes after a deploy changed their encoding, or an SDK's own key) may
	// have been charged. Never pay again under a new intent because of it: send the intent's
	// original bytes, or look at its record. Refused locally, nothing is written; answered
	// by the server to a fresh key's first attempt, the record is failed (a conflict after
	// an attempt whose outcome is unknown is ErrOutcomeUnknown instead).
	// The server's refusal may judge a header too (Content-Type, an API version, the
	// account): the error then says that this keystore sent the key only with the record's
	// method, URL and body, so that the difference lies in a header or another client.
	ErrKeyConflict = errors.New("idem: idempotency key reused with another request")
	// ErrPermanent: the server gave a final answer that must not be retried (a 4xx
	// validation or auth error, any 400 or 422 that does not name key reuse, a stored or
	// replayed 4xx other than 408, 409, 425 and 429 (which speak of a request in flight,
	// never the end), or a hint header saying "do not retry" on a 4xx). OperationError.Response
	// holds that answer. The record is failed. A stored 5xx is never ErrPermanent: see
	// ErrStoredServerError. Nor is a 4xx to a resend after an unknown outcome, or (a 400
	// aside, judged on the bytes the earlier request shares) after a status "not found" for
	// a key that may have been sent before (this call's, or a resumed record's), unless
	// marked as the key's replay: it says nothing of the earlier request, which may have run
	// (a duplicate-reference check ahead of the key's that found its charge) or may still
	// arrive, so the call ends with ErrOutcomeUnknown. In both cases the business lookup
	// (Config.Lookup), when set, is asked first: a payment found makes the call a success.
	ErrPermanent = errors.New("idem: permanent failure")
	// ErrRetryAfterTooLong: the server asked to wait (Retry-After, RFC 9110 §10.2.3) longer
	// than Policy.MaxRetryAfter or than the time left of Policy.MaxElapsed; idem stops at
	// once instead of sleeping. A wait within the cap that would pass a context deadline
	// coming before the end of MaxElapsed is ErrDeadline instead.
	// OperationError.RetryAfter holds the requested wait. The record stays pending.
	ErrRetryAfterTooLong = errors.New("idem: Retry-After beyond the allowed wait")
	// ErrDeadline: the context deadline comes before the next attempt could start, so idem
	// returns at once rather than sleeping into it. The record stays pending.
	// errors.Is(err, context.DeadlineExceeded) matches too.
	ErrDeadline = errors.New("idem: context deadline before the next attempt")
	// ErrBudgetExhausted: the client-wide retry budget is empty, so no retry was made (a
	// retry within the call, or the first send of a resumed record that was sent before).
	// The record stays pending.
	ErrBudgetExhausted = errors.New("idem: retry budget exhausted")
	// ErrKeyExpired: the outcome is unknown and the key is older than Config.KeyTTL (the
	// server's retention window), or created later than this clock's now by more than twice
	// Config.Fleet.MaxClockSkew (a clock stepped back: its age is unknown), so resending could
	// execute the intent twice. The record is marked for manual reconciliation and never
	// resent: Config.Lookup settles it (a payment found at once; "not executed" only
	// one minute after the key's last request), or Client.Resolve.
	ErrKeyExpired = errors.New("idem: key past the server's retention window; reconcile manually")
	// ErrCanceled: the caller's context was cancelled or passed its deadline. The record stays
	// pending; errors.Is(err, context.Canceled) or context.DeadlineExceeded also matches.
	ErrCanceled = errors.New("idem: call canceled")
	// ErrInvalidOperation: the operation cannot be sent as given (bad key, method or URL).
	ErrInvalidOperation = errors.New("idem: invalid operation")
	// ErrInvalidPolicy: a policy value is out of range (the error names the field and the
	// range; see the fields of Policy), from NewClient or from Do for a per-call policy.
	ErrInvalidPolicy = errors.New("idem: invalid policy")
	// ErrInvalidConfig: NewClient was given an unusable Config.
	ErrInvalidConfig = errors.New("idem: invalid config")
)

// OperationError is the error Do and Recover return for an operation that did not succeed.
// It says how far the operation got, so that the caller can tell "failed" from "unknown".
type OperationError struct {
	Key            string        // the idempotency key (as persisted)
	Scope          string        // the tenant scope of the key
	Intent         string        // the caller-named intent, if any
	Attempts       int           // requests sent to the server in this call
	LastStatusCode int           // HTTP status of the last answer; 0 if none came
	RetryAfter     time.Duration // the wait the server asked for, when that stopped the call
	Unknown        bool          // an attempt may have executed and was not resolved
	Kind           error         // the sentinel saying why the call stopped (ErrExhausted, ...)
	Cause          error         // the underlying error (transport, context, store), may be nil
	// Response is the last answer the server gave in this call (status, headers, body up to
	// Policy.MaxResponseSize): the final answer for ErrPermanent, ErrKeyConflict and
	// ErrStoredServerError, the last one seen when retries stopped (ErrExhausted,
	// ErrRetryAfterTooLong, ErrDeadline, ErrBudgetExhausted...). Nil when no answer came.
	// The record keeps it (keystore.Record.Response).
	Response *Result
	Stored   bool // answered from the keystore: an earlier call ended this way, nothing was sent
}

// Error describes the stop in one line: kind, key, attempts, last status and cause.
func (e *OperationError) Error() string {
	var b strings.Builder
	if e.Kind != nil {
		b.WriteString(e.Kind.Error())
	} else { // a zero OperationError, made by hand
		b.WriteString("idem: operation error")
	}
	fmt.Fprintf(&b, " (key %q", e.Key)
	if e.Intent != "" {
		fmt.Fprintf(&b, ", intent %q", e.Intent)
	}
	fmt.Fprintf(&b, ", %d attempt(s)", e.Attempts)
	if e.LastStatusCode != 0 {
		fmt.Fprintf(&b, ", last status %d", e.LastStatusCode)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, ", server asked to wait %s", e.RetryAfter)
	}
	b.WriteString(")")
	if e.Unknown && e.Kind != ErrOutcomeUnknown {
		b.WriteString("; outcome unknown")
	}
	if e.Cause != nil {
		b.WriteString(": ")
		b.WriteString(e.Cause.Error())
	}
	return b.String()
}

// Is matches the Kind sentinel and, when Unknown is set, ErrOutcomeUnknown.
func (e *OperationError) Is(target error) bool {
	return target == e.Kind || (e.Unknown && target == ErrOutcomeUnknown)
}

// Unwrap returns the cause, so errors.Is(err, context.Canceled) and errors.As on transport
// errors work through an OperationError.
func (e *OperationError) Unwrap() error { return e.Cause }
