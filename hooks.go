package idem

import (
	"errors"
	"log/slog"
	"time"

	"github.com/idemkit/idem/keystore"
)

// Event is what every hook event carries. Event structs may gain fields; match on names.
type Event struct {
	Key     string    // the idempotency key
	Scope   string    // the tenant scope
	Intent  string    // the caller-named intent, if any
	Attempt int       // requests sent in this call so far
	Time    time.Time // when it happened (Config.Now)
}

// AttemptEvent: one request came back (or failed) and was classified.
type AttemptEvent struct {
	Event
	StatusCode int   // 0 when there was no response
	Err        error // transport error or attempt timeout
	Written    bool  // the request may have reached the server
	Class      Class // what it means
}

// RetryEvent: a resend was scheduled after Delay.
type RetryEvent struct {
	Event
	Delay      time.Duration // the wait before the resend
	Reason     Class         // ClassRetry, ClassUnknown (after a status check) or ClassInProgress
	RetryAfter bool          // Delay is the server's Retry-After, not backoff
}

// KeyStatusCheckEvent: the status endpoint was asked about the key.
type KeyStatusCheckEvent struct {
	Event
	State KeyStatusState // what the endpoint said (KeyStatusUnknown when Err is set)
	Err   error          // transport or KeyStatusFunc error, if any
}

// ReplayEvent: the server replayed a stored answer (Idempotent-Replayed: true).
type ReplayEvent struct {
	Event
	StatusCode int // the replayed status
}

// KeyConflictEvent: the key was reused with another payload (a 422 or Stripe-style 400 that
// names key reuse, see IsKeyReuse; or refused locally).
type KeyConflictEvent struct {
	Event
	StatusCode int // 422 or 400, or 0 when refused locally
}

// InProgressEvent: the server is still executing the key (409); idem waits Wait.
type InProgressEvent struct {
	Event
	Wait time.Duration // how long idem waits before asking or resending
}

// KeyExpiredEvent: the key is older than KeyTTL and its outcome unknown: manual reconcile.
type KeyExpiredEvent struct {
	Event
	Age time.Duration // time since the key was persisted
}

// UnknownEvent: an attempt's outcome became unknown (timeout, reset, 5xx after write).
type UnknownEvent struct {
	Event
	StatusCode int   // 408, 500, 502, 504..., or 0 for a transport error
	Err        error // the transport error or attempt timeout, if any
}

// BudgetDeniedEvent: the retry budget refused a retry.
type BudgetDeniedEvent struct {
	Event
	Available int // tokens left
}

// GiveUpEvent: the call ended without success. Err is the *OperationError Do returns.
type GiveUpEvent struct {
	Event
	Err *OperationError // what Do returns
}

// StoredServerErrorEvent: the server stored a 5xx for the key (replayed, or reported by the
// status endpoint): execution began, effect unknown. The record goes manual.
type StoredServerErrorEvent struct {
	Event
	StatusCode int    // the stored 5xx
	Source     Source // SourceReplay, SourceKeyStatus, or SourceResponse (a 5xx with a "do not retry" hint)
}

// ResolvedEvent: a manual record was settled by Config.Lookup or Client.Resolve.
type ResolvedEvent struct {
	Event
	Executed bool   // true: succeeded with the answer found; false: not executed (failed)
	ByLookup bool   // settled by Config.Lookup (false: Client.Resolve)
	Note     string // the note kept on the record
}

// Hooks receive events as they happen, synchronously: on the calling goroutine, except
// OnClaimLost and OnClockSkew (and any hook fired by a background purge or reclaim pass, or
// by one of Recover's workers), which may run on the client's own goroutines. Keep them
// fast, never block, and make them safe for concurrent use. Nil fields are skipped. A hook
// (or a KeyStatusFunc, classifier, store) that panics on one of Recover's workers has its
// panic raised again by Recover on the caller's goroutine after the run; on a background
// pass or the lease renewer, where no caller waits, the panic is logged (Config.Logger).
type Hooks struct {
	OnAttempt        func(AttemptEvent)        // after every request, classified
	OnRetry          func(RetryEvent)          // a resend was scheduled, with its delay and reason
	OnKeyStatusCheck func(KeyStatusCheckEvent) // after every status-endpoint ask
	OnReplay         func(ReplayEvent)         // the server replayed a stored answer
	OnKeyConflict    func(KeyConflictEvent)    // a key reused with another payload (422 or local)
	OnInProgress     func(InProgressEvent)     // a 409: the key is executing elsewhere; idem waits
	OnKeyExpired     func(KeyExpiredEvent)     // an unknown outcome past KeyTTL: manual reconcile
	OnUnknown        func(UnknownEvent)        // an attempt's outcome became unknown
	OnBudgetDenied   func(BudgetDeniedEvent)   // the retry budget refused a retry
	OnGiveUp         func(GiveUpEvent)         // a call ended without a result

	OnStoredServerError func(StoredServerErrorEvent) // a stored 5xx: outcome unknown, record manual
	OnResolved          func(ResolvedEvent)          // a manual record was settled
	OnDamagedRecord     func(DamagedRecordEvent)     // Recover skipped a record that cannot be decoded
	// OnClaimLost: another instance took the call's record over (fenced write); the call
	// stops sending. It may run on the client's lease renewer (a goroutine of its own).
	OnClaimLost func(ClaimLostEvent)
	// OnClockSkew: an operation was refused because this client's clock and the keystore's
	// differ by more than Config.MaxClockSkew (ErrClockSkew). It may run on a background
	// purge or reclaim goroutine.
	OnClockSkew func(ClockSkewEvent)
}

func (c *Client) event(cl *call) Event {
	return Event{Key: cl.rec.Key, Scope: cl.rec.Scope, Intent: cl.rec.Intent, Attempt: cl.attempts, Time: c.cfg.Now()}
}

func (c *Client) onAttempt(cl *call, a *Attempt, class Class) {
	if l := c.cfg.Logger; l != nil {
		l.Debug("idem attempt", "key", cl.rec.Key, "attempt", a.Number, "status", a.StatusCode(),
			"class", class.String(), "written", a.Written, "error", a.Err)
	}
	if h := c.cfg.Hooks.OnAttempt; h != nil {
		h(AttemptEvent{Event: c.event(cl), StatusCode: a.StatusCode(), Err: a.Err, Written: a.Written, Class: class})
	}
}

func (c *Client) onRetry(cl *call, d time.Duration, reason Class, fromRA bool) {
	c.stats.retries.Add(1)
	if l := c.cfg.Logger; l != nil {
		l.Debug("idem retry", "key", cl.rec.Key, "delay", d, "reason", reason.String(), "retry_after", fromRA)
	}
	if h := c.cfg.Hooks.OnRetry; h != nil {
		h(RetryEvent{Event: c.event(cl), Delay: d, Reason: reason, RetryAfter: fromRA})
	}
}

func (c *Client) onStatusCheck(cl *call, st KeyStatus, err error) {
	c.stats.statusChecks.Add(1)
	if l := c.cfg.Logger; l != nil {
		l.Debug("idem status check", "key", cl.rec.Key, "state", st.State.String(), "error", err)
	}
	if h := c.cfg.Hooks.OnKeyStatusCheck; h != nil {
		h(KeyStatusCheckEvent{Event: c.event(cl), State: st.State, Err: err})
	}
}

func (c *Client) onReplay(cl *call, code int) {
	c.stats.replays.Add(1)
	if h := c.cfg.Hooks.OnReplay; h != nil {
		h(ReplayEvent{Event: c.event(cl), StatusCode: code})
	}
}

func (c *Client) onKeyConflict(cl *call, code int) {
	c.stats.keyConflicts.Add(1)
	if l := c.cfg.Logger; l != nil {
		l.Warn("idem key reused with another request", "key", cl.rec.Key, "status", code)
	}
	if h := c.cfg.Hooks.OnKeyConflict; h != nil {
		h(KeyConflictEvent{Event: c.event(cl), StatusCode: code})
	}
}

// onLocalKeyConflict reports a key refused before sending: it was bound to another request.
func (c *Client) onLocalKeyConflict(err error) {
	c.stats.keyConflicts.Add(1)
	var oe *OperationError
	if !errors.As(err, &oe) {
		return
	}
	if l := c.cfg.Logger; l != nil {
		l.Warn("idem key reused with another request", "key", oe.Key, "local", true)
	}
	if h := c.cfg.Hooks.OnKeyConflict; h != nil {
		h(KeyConflictEvent{Event: Event{Key: oe.Key, Scope: oe.Scope, Intent: oe.Intent, Time: c.cfg.Now()}})
	}
}

func (c *Client) onInProgress(cl *call, wait time.Duration) {
	c.stats.inProgress.Add(1)
	if h := c.cfg.Hooks.OnInProgress; h != nil {
		h(InProgressEvent{Event: c.event(cl), Wait: wait})
	}
}

func (c *Client) onKeyExpired(cl *call, age time.Duration) {
	c.stats.keyExpired.Add(1)
	if l := c.cfg.Logger; l != nil {
		l.Warn("idem key past retention; manual reconciliation needed", "key", cl.rec.Key, "age", age)
	}
	if h := c.cfg.Hooks.OnKeyExpired; h != nil {
		h(KeyExpiredEvent{Event: c.event(cl), Age: age})
	}
}

func (c *Client) onUnknown(cl *call, a *Attempt) {
	c.stats.unknown.Add(1)
	if h := c.cfg.Hooks.OnUnknown; h != nil {
		h(UnknownEvent{Event: c.event(cl), StatusCode: a.StatusCode(), Err: a.Err})
	}
}

func (c *Client) onBudgetDenied(cl *call) {
	c.stats.budgetDenied.Add(1)
	if h := c.cfg.Hooks.OnBudgetDenied; h != nil {
		h(BudgetDeniedEvent{Event: c.event(cl), Available: c.budget.Available()})
	}
}

func (c *Client) onGiveUp(cl *call, e *OperationError) {
	c.stats.finalFailures.Add(1)
	if e.Kind == ErrExhausted && cl.known == knownUnknown && cl.lastCode == 409 {
		c.stats.inProgressTimeouts.Add(1)
	}
	if l := c.cfg.Logger; l != nil {
		l.Info("idem call ended without success", "key", cl.rec.Key, "error", e.Error())
	}
	if h := c.cfg.Hooks.OnGiveUp; h != nil {
		h(GiveUpEvent{Event: c.event(cl), Err: e})
	}
}

func (c *Client) warn(msg string, rec *keystore.Record, err error) {
	if l := c.cfg.Logger; l != nil {
		l.Warn("idem "+msg, "key", rec.Key, slog.Any("error", err))
	}
}

func (c *Client) onStoredServerError(cl *call, resp *Result) {
	c.stats.storedServerErrors.Add(1)
	if l := c.cfg.Logger; l != nil {
		l.Warn("idem server stored an error for the key; outcome unknown, reconciliation needed",
			"key", cl.rec.Key, "intent", cl.rec.Intent, "status", resp.StatusCode, "source", string(resp.Source))
	}
	if h := c.cfg.Hooks.OnStoredServerError; h != nil {
		h(StoredServerErrorEvent{Event: c.event(cl), StatusCode: resp.StatusCode, Source: resp.Source})
	}
}

func (c *Client) onResolved(rec *keystore.Record, executed, byLookup bool) {
	if byLookup {
		c.stats.resolvedByLookup.Add(1)
	} else {
		c.stats.resolvedByCaller.Add(1)
	}
	if l := c.cfg.Logger; l != nil {
		l.Info("idem manual record resolved", "key", rec.Key, "intent", rec.Intent, "executed", executed,
			"by_lookup", byLookup, "note", rec.Note)
	}
	if h := c.cfg.Hooks.OnResolved; h != nil {
		h(ResolvedEvent{Event: Event{Key: rec.Key, Scope: rec.Scope, Intent: rec.Intent, Time: c.cfg.Now()},
			Executed: executed, ByLookup: byLookup, Note: rec.Note})
	}
}
