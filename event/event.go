// Package event holds the events idem reports to Hooks as a call, Recover or a background
// pass goes along: attempts, retries, status checks, replays, unknown outcomes, verdicts.
package event

import (
	"time"

	"github.com/idemkit/idem/outcome"
)

// Event is what every hook event carries. Event structs may gain fields; match on names.
type Event struct {
	Key     string    // the idempotency key
	Scope   string    // the tenant scope
	Intent  string    // the caller-named intent, if any
	Attempt int       // requests sent in this call so far
	Time    time.Time // when it happened (idem.Config.Now)
}

// Attempt: one request came back (or failed) and was classified.
type Attempt struct {
	Event
	StatusCode int           // 0 when there was no response
	Err        error         // transport error or attempt timeout
	Written    bool          // the request may have reached the server
	Class      outcome.Class // what it means
}

// Retry: a resend was scheduled after Delay.
type Retry struct {
	Event
	Delay      time.Duration // the wait before the resend
	Reason     outcome.Class // outcome.ClassRetry, ClassUnknown (after a status check) or ClassInProgress
	RetryAfter bool          // Delay is the server's Retry-After, not backoff
}

// KeyStatusCheck: the status endpoint was asked about the key.
type KeyStatusCheck struct {
	Event
	State outcome.KeyStatusState // what the endpoint said (outcome.KeyStatusUnknown when Err is set)
	Err   error                  // transport or KeyStatusFunc error, if any
}

// Replay: the server replayed a stored answer (Idempotent-Replayed: true).
type Replay struct {
	Event
	StatusCode int // the replayed status
}

// KeyConflict: the key was reused with another payload (a 422 or Stripe-style 400 that
// names key reuse, see outcome.IsKeyReuse; or refused locally).
type KeyConflict struct {
	Event
	StatusCode int // 422 or 400, or 0 when refused locally
}

// InProgress: the server is still executing the key (409); idem waits Wait.
type InProgress struct {
	Event
	Wait time.Duration // how long idem waits before asking or resending
}

// KeyExpired: the key is older than KeyTTL and its outcome unknown: manual reconcile.
type KeyExpired struct {
	Event
	Age time.Duration // time since the key was persisted
}

// Unknown: an attempt's outcome became unknown (timeout, reset, 5xx after write).
type Unknown struct {
	Event
	StatusCode int   // 408, 500, 502, 504..., or 0 for a transport error
	Err        error // the transport error or attempt timeout, if any
}

// BudgetDenied: the retry budget refused a retry.
type BudgetDenied struct {
	Event
	Available int // tokens left
}

// GiveUp: the call ended without success. Err is the error Do returns.
type GiveUp struct {
	Event
	Err error // what Do returns: an *idem.OperationError (errors.As)
}

// StoredServerError: the server stored a 5xx for the key (replayed, or reported by the
// status endpoint): execution began, effect unknown. The record goes manual.
type StoredServerError struct {
	Event
	StatusCode int            // the stored 5xx
	Source     outcome.Source // outcome.SourceReplay, SourceKeyStatus, or SourceResponse (a 5xx with a "do not retry" hint)
}

// Resolved: a manual record was settled by idem.Config.Lookup or idem.Client.Resolve.
type Resolved struct {
	Event
	Executed bool   // true: succeeded with the answer found; false: not executed (failed)
	ByLookup bool   // settled by idem.Config.Lookup (false: idem.Client.Resolve)
	Note     string // the note kept on the record
}

// Hooks receive events (idem.Config.Hooks) as they happen, synchronously: on the calling goroutine, except
// OnClaimLost and OnClockSkew (and any hook fired by a background purge or reclaim pass, or
// by one of Recover's workers), which may run on the client's own goroutines. Keep them
// fast, never block, and make them safe for concurrent use. Nil fields are skipped. A hook
// (or a KeyStatusFunc, classifier, store) that panics on one of Recover's workers has its
// panic raised again by Recover on the caller's goroutine after the run; on a background
// pass or the lease renewer, where no caller waits, the panic is logged (idem.Config.Logger).
type Hooks struct {
	OnAttempt        func(Attempt)        // after every request, classified
	OnRetry          func(Retry)          // a resend was scheduled, with its delay and reason
	OnKeyStatusCheck func(KeyStatusCheck) // after every status-endpoint ask
	OnReplay         func(Replay)         // the server replayed a stored answer
	OnKeyConflict    func(KeyConflict)    // a key reused with another payload (422 or local)
	OnInProgress     func(InProgress)     // a 409: the key is executing elsewhere; idem waits
	OnKeyExpired     func(KeyExpired)     // an unknown outcome past KeyTTL: manual reconcile
	OnUnknown        func(Unknown)        // an attempt's outcome became unknown
	OnBudgetDenied   func(BudgetDenied)   // the retry budget refused a retry
	OnGiveUp         func(GiveUp)         // a call ended without a result

	OnStoredServerError func(StoredServerError) // a stored 5xx: outcome unknown, record manual
	OnResolved          func(Resolved)          // a manual record was settled
	OnDamagedRecord     func(DamagedRecord)     // Recover skipped a record that cannot be decoded
	// OnClaimLost: another instance took the call's record over (fenced write); the call
	// stops sending. It may run on the client's lease renewer (a goroutine of its own).
	OnClaimLost func(ClaimLost)
	// OnClockSkew: an operation was refused because this client's clock and the keystore's
	// differ by more than idem.Config.Fleet.MaxClockSkew (ErrClockSkew). It may run on a background
	// purge or reclaim goroutine.
	OnClockSkew func(ClockSkew)
}

// ClaimLost: a fenced write told the call that another instance holds the record now.
type ClaimLost struct {
	Event
	Fence   int64  // the token this call held
	Current int64  // the stored token (0 if unknown)
	Owner   string // the instance that holds the record now ("" if released or unknown)
}

// ClockSkew: an operation was refused because the clocks disagree (Hooks.OnClockSkew).
// Event.Key is set for a refused lease takeover, empty for a purge or an orphan claim.
type ClockSkew struct {
	Event
	Err error // the refusal: an *idem.ClockSkewError (errors.As) with both clocks
}

// DamagedRecord: Recover found a record that cannot be decoded and skipped it.
type DamagedRecord struct {
	Scope string // the record's scope, "" if unreadable
	Key   string // the record's key as stored
	Err   error  // why it cannot be decoded
}
