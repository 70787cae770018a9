package idem

import (
	"errors"
	"log/slog"
	"time"

	"github.com/idemkit/idem/event"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

func (c *Client) event(cl *call) event.Event {
	return event.Event{Key: cl.rec.Key, Scope: cl.rec.Scope, Intent: cl.rec.Intent, Attempt: cl.attempts, Time: c.cfg.Now()}
}

func (c *Client) onAttempt(cl *call, a *outcome.Attempt, class outcome.Class) {
	if l := c.cfg.Logger; l != nil {
		l.Debug("idem attempt", "key", cl.rec.Key, "attempt", a.Number, "status", a.StatusCode(),
			"class", class.String(), "written", a.Written, "error", a.Err)
	}
	if h := c.cfg.Hooks.OnAttempt; h != nil {
		h(event.Attempt{Event: c.event(cl), StatusCode: a.StatusCode(), Err: a.Err, Written: a.Written, Class: class})
	}
}

func (c *Client) onRetry(cl *call, d time.Duration, reason outcome.Class, fromRA bool) {
	c.stats.retries.Add(1)
	if l := c.cfg.Logger; l != nil {
		l.Debug("idem retry", "key", cl.rec.Key, "delay", d, "reason", reason.String(), "retry_after", fromRA)
	}
	if h := c.cfg.Hooks.OnRetry; h != nil {
		h(event.Retry{Event: c.event(cl), Delay: d, Reason: reason, RetryAfter: fromRA})
	}
}

func (c *Client) onStatusCheck(cl *call, st outcome.KeyStatus, err error) {
	c.stats.statusChecks.Add(1)
	if l := c.cfg.Logger; l != nil {
		l.Debug("idem status check", "key", cl.rec.Key, "state", st.State.String(), "error", err)
	}
	if h := c.cfg.Hooks.OnKeyStatusCheck; h != nil {
		h(event.KeyStatusCheck{Event: c.event(cl), State: st.State, Err: err})
	}
}

func (c *Client) onReplay(cl *call, code int) {
	c.stats.replays.Add(1)
	if h := c.cfg.Hooks.OnReplay; h != nil {
		h(event.Replay{Event: c.event(cl), StatusCode: code})
	}
}

func (c *Client) onKeyConflict(cl *call, code int) {
	c.stats.keyConflicts.Add(1)
	if l := c.cfg.Logger; l != nil {
		l.Warn("idem key reused with another request", "key", cl.rec.Key, "status", code)
	}
	if h := c.cfg.Hooks.OnKeyConflict; h != nil {
		h(event.KeyConflict{Event: c.event(cl), StatusCode: code})
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
		h(event.KeyConflict{Event: event.Event{Key: oe.Key, Scope: oe.Scope, Intent: oe.Intent, Time: c.cfg.Now()}})
	}
}

func (c *Client) onInProgress(cl *call, wait time.Duration) {
	c.stats.inProgress.Add(1)
	if h := c.cfg.Hooks.OnInProgress; h != nil {
		h(event.InProgress{Event: c.event(cl), Wait: wait})
	}
}

func (c *Client) onKeyExpired(cl *call, age time.Duration) {
	c.stats.keyExpired.Add(1)
	if l := c.cfg.Logger; l != nil {
		l.Warn("idem key past retention; manual reconciliation needed", "key", cl.rec.Key, "age", age)
	}
	if h := c.cfg.Hooks.OnKeyExpired; h != nil {
		h(event.KeyExpired{Event: c.event(cl), Age: age})
	}
}

func (c *Client) onUnknown(cl *call, a *outcome.Attempt) {
	c.stats.unknown.Add(1)
	if h := c.cfg.Hooks.OnUnknown; h != nil {
		h(event.Unknown{Event: c.event(cl), StatusCode: a.StatusCode(), Err: a.Err})
	}
}

func (c *Client) onBudgetDenied(cl *call) {
	c.stats.budgetDenied.Add(1)
	if h := c.cfg.Hooks.OnBudgetDenied; h != nil {
		h(event.BudgetDenied{Event: c.event(cl), Available: c.budget.tokens()})
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
		h(event.GiveUp{Event: c.event(cl), Err: e})
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
		h(event.StoredServerError{Event: c.event(cl), StatusCode: resp.StatusCode, Source: resp.Source})
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
		h(event.Resolved{Event: event.Event{Key: rec.Key, Scope: rec.Scope, Intent: rec.Intent, Time: c.cfg.Now()},
			Executed: executed, ByLookup: byLookup, Note: rec.Note})
	}
}
