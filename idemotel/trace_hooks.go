package idemotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/event"
)

// Event attribute names (on the events of a call span).
const (
	AttrWaitSeconds    = attribute.Key("idem.wait.seconds")     // the wait before the resend, in seconds
	AttrWaitReason     = attribute.Key("idem.wait.reason")      // why: retry, unknown (after a status check), in_progress
	AttrWaitRetryAfter = attribute.Key("idem.wait.retry_after") // true: the delay is the server's Retry-After, honoured
	AttrKeyStatus      = attribute.Key("idem.key_status.state") // completed, processing, not_found, unknown
	AttrVerdict        = attribute.Key("idem.lookup.verdict")   // executed, not_executed, unknown
	AttrExecuted       = attribute.Key("idem.resolved.executed")
	AttrByLookup       = attribute.Key("idem.resolved.by_lookup")
	AttrErrorMessage   = attribute.Key("error.message")
)

// register makes ct the span that the events of key (or, failing that, intent) go to. The
// first registered call of a key wins: idem makes a second Do of the same key wait for the
// first, and the events are the first's.
func (t *Tracer) register(key, intent string, ct *callTrace) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byKey[key] = append(t.byKey[key], ct)
	if intent != "" {
		t.byIntent[intent] = append(t.byIntent[intent], ct)
	}
}

func (t *Tracer) unregister(key, intent string, ct *callTrace) {
	t.mu.Lock()
	defer t.mu.Unlock()
	drop := func(m map[string][]*callTrace, k string) {
		l := m[k]
		for i, c := range l {
			if c == ct {
				l = append(l[:i:i], l[i+1:]...)
				break
			}
		}
		if len(l) == 0 {
			delete(m, k)
		} else {
			m[k] = l
		}
	}
	drop(t.byKey, key)
	if intent != "" {
		drop(t.byIntent, intent)
	}
}

// find returns the call an event belongs to: by key, or by intent when Do sent the intent's
// earlier record under that record's key (Result.Key differs from Operation.Key); nil when
// the call is not traced.
func (t *Tracer) find(key, intent string) *callTrace {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.byKey[key]; len(l) > 0 {
		return l[0]
	}
	if intent != "" {
		if l := t.byIntent[intent]; len(l) > 0 {
			return l[0]
		}
	}
	return nil
}

func (t *Tracer) findEvent(e event.Event) *callTrace { return t.find(e.Key, e.Intent) }

// Hooks returns hooks that record the call's attempts and events, then call next's hook of
// the same name (nil fields of next are skipped). Put the result in idem.Config.Hooks.
func (t *Tracer) Hooks(next event.Hooks) event.Hooks {
	h := next
	h.OnAttempt = func(ev event.Attempt) {
		if ct := t.findEvent(ev.Event); ct != nil {
			ct.attempt(ev)
		}
		call(next.OnAttempt, ev)
	}
	h.OnRetry = func(ev event.Retry) {
		if ct := t.findEvent(ev.Event); ct != nil {
			ct.event(EventWait, ev.Attempt, AttrWaitSeconds.Float64(ev.Delay.Seconds()),
				AttrWaitReason.String(ev.Reason.String()), AttrWaitRetryAfter.Bool(ev.RetryAfter))
		}
		call(next.OnRetry, ev)
	}
	h.OnKeyStatusCheck = func(ev event.KeyStatusCheck) {
		if ct := t.findEvent(ev.Event); ct != nil {
			attrs := []attribute.KeyValue{AttrKeyStatus.String(ev.State.String())}
			if ev.Err != nil {
				attrs = append(attrs, AttrErrorMessage.String(ev.Err.Error()))
			}
			ct.mu.Lock()
			ct.statusAsk++
			ct.mu.Unlock()
			ct.event(EventStatusCheck, ev.Attempt, attrs...)
		}
		call(next.OnKeyStatusCheck, ev)
	}
	h.OnReplay = func(ev event.Replay) {
		if ct := t.findEvent(ev.Event); ct != nil {
			ct.event(EventReplay, ev.Attempt, AttrStatusCode.Int(ev.StatusCode))
		}
		call(next.OnReplay, ev)
	}
	h.OnKeyConflict = func(ev event.KeyConflict) {
		if ct := t.findEvent(ev.Event); ct != nil {
			ct.event(EventKeyConflict, ev.Attempt, AttrStatusCode.Int(ev.StatusCode))
		}
		call(next.OnKeyConflict, ev)
	}
	h.OnInProgress = func(ev event.InProgress) {
		if ct := t.findEvent(ev.Event); ct != nil {
			ct.event(EventInProgress, ev.Attempt, AttrWaitSeconds.Float64(ev.Wait.Seconds()))
		}
		call(next.OnInProgress, ev)
	}
	h.OnKeyExpired = func(ev event.KeyExpired) {
		if ct := t.findEvent(ev.Event); ct != nil {
			ct.event(EventKeyExpired, ev.Attempt, attribute.Float64("idem.key.age_seconds", ev.Age.Seconds()))
		}
		call(next.OnKeyExpired, ev)
	}
	h.OnUnknown = func(ev event.Unknown) {
		if ct := t.findEvent(ev.Event); ct != nil {
			attrs := []attribute.KeyValue{AttrStatusCode.Int(ev.StatusCode)}
			if ev.Err != nil {
				attrs = append(attrs, AttrErrorMessage.String(ev.Err.Error()))
			}
			ct.event(EventUnknown, ev.Attempt, attrs...)
		}
		call(next.OnUnknown, ev)
	}
	h.OnBudgetDenied = func(ev event.BudgetDenied) {
		if ct := t.findEvent(ev.Event); ct != nil {
			ct.event(EventBudgetDenied, ev.Attempt, attribute.Int("idem.retry_budget.available", ev.Available))
		}
		call(next.OnBudgetDenied, ev)
	}
	h.OnGiveUp = func(ev event.GiveUp) {
		var oe *idem.OperationError
		if ct := t.findEvent(ev.Event); ct != nil && errors.As(ev.Err, &oe) && oe.Kind != nil {
			ct.event(EventGiveUp, ev.Attempt, AttrErrorKind.String(oe.Kind.Error()))
		}
		call(next.OnGiveUp, ev)
	}
	h.OnStoredServerError = func(ev event.StoredServerError) {
		if ct := t.findEvent(ev.Event); ct != nil {
			ct.event(EventStoredServerError, ev.Attempt, AttrStatusCode.Int(ev.StatusCode), AttrSource.String(string(ev.Source)))
		}
		call(next.OnStoredServerError, ev)
	}
	h.OnResolved = func(ev event.Resolved) {
		if ct := t.findEvent(ev.Event); ct != nil {
			ct.event(EventResolved, ev.Attempt, AttrExecuted.Bool(ev.Executed), AttrByLookup.Bool(ev.ByLookup))
		}
		call(next.OnResolved, ev)
	}
	return h
}

func call[E any](f func(E), ev E) {
	if f != nil {
		f(ev)
	}
}

// Lookup wraps a business lookup (idem.Config.Lookup) so that each ask made for a traced
// call is an idem.lookup event on its span, with the verdict (idem.lookup.verdict) and the
// error, if any. The lookup's answer is returned unchanged; nil gives nil (no lookup).
func (t *Tracer) Lookup(next idem.LookupFunc) idem.LookupFunc {
	if next == nil {
		return nil
	}
	return func(ctx context.Context, req idem.LookupRequest) (idem.Resolution, error) {
		r, err := next(ctx, req)
		if req.Record != nil {
			if ct := t.find(req.Record.Key, req.Record.Intent); ct != nil {
				attrs := []attribute.KeyValue{AttrVerdict.String(r.Verdict.String())}
				if err != nil {
					attrs = append(attrs, AttrErrorMessage.String(err.Error()))
				}
				ct.event(EventLookup, req.Record.Attempts, attrs...)
			}
		}
		return r, err
	}
}
