package idemserver

import "sync/atomic"

// EventKind says what happened to a keyed request.
type EventKind int

const (
	// EventExecuted: a claimed request ran and its answer was stored.
	EventExecuted EventKind = iota + 1
	// EventNotExecuted: the handler answered before execution began; nothing stored.
	EventNotExecuted
	// EventReplay: a stored answer was replayed.
	EventReplay
	// EventPayloadConflict: the key was reused with another fingerprint (422).
	EventPayloadConflict
	// EventConcurrent: the key was in progress when the request came (409 or a wait).
	EventConcurrent
	// EventExpiredReuse: the key's stored answer had expired; the request ran again.
	EventExpiredReuse
	// EventInProgressTimeout: a request waited Config.Wait and the key was still in progress.
	EventInProgressTimeout
	// EventTakeover: a checkpointed key whose owner was gone was resumed.
	EventTakeover
	// EventStoreError: the backend failed; the answer was 503 and nothing was stored.
	EventStoreError
)

// Event is passed to Config.OnEvent.
type Event struct {
	Kind       EventKind // what happened
	Scope      Scope     // the tenant, operation and key it happened to
	StatusCode int       // the answer's status, when one was written
	Err        error     // for EventStoreError
}

// Stats are the middleware's counters since New, one per EventKind plus Purged.
type Stats struct {
	Executed           int64 // answers stored after execution (EventExecuted)
	NotExecuted        int64 // answers sent but not stored: given before execution began
	Replays            int64 // stored answers replayed
	PayloadConflicts   int64 // 422: a key reused with another request (should be zero)
	Concurrent         int64 // requests that found their key in progress (409 or a wait)
	ExpiredReuse       int64 // keys executed again after their stored answer expired
	InProgressTimeouts int64 // waits (Config.Wait) that ended with the key still in progress
	Takeovers          int64 // checkpointed keys resumed after their owner was gone
	StoreErrors        int64 // backend failures answered 503
	Purged             int64 // expired answers deleted by Purge
	HookPanics         int64 // panics of Config.OnEvent, recovered (see OnEvent)
}

type counters struct {
	executed, notExecuted, replays, conflicts, concurrent atomic.Int64
	expired, timeouts, takeovers, storeErrors, purged     atomic.Int64
	hookPanics                                            atomic.Int64
}

// Stats returns a snapshot of the counters.
func (m *Middleware) Stats() Stats {
	c := &m.n
	return Stats{Executed: c.executed.Load(), NotExecuted: c.notExecuted.Load(), Replays: c.replays.Load(),
		PayloadConflicts: c.conflicts.Load(), Concurrent: c.concurrent.Load(), ExpiredReuse: c.expired.Load(),
		InProgressTimeouts: c.timeouts.Load(), Takeovers: c.takeovers.Load(), StoreErrors: c.storeErrors.Load(),
		Purged: c.purged.Load(), HookPanics: c.hookPanics.Load()}
}

func (m *Middleware) event(e Event) {
	c := &m.n
	switch e.Kind {
	case EventExecuted:
		c.executed.Add(1)
	case EventNotExecuted:
		c.notExecuted.Add(1)
	case EventReplay:
		c.replays.Add(1)
	case EventPayloadConflict:
		c.conflicts.Add(1)
	case EventConcurrent:
		c.concurrent.Add(1)
	case EventExpiredReuse:
		c.expired.Add(1)
	case EventInProgressTimeout:
		c.timeouts.Add(1)
	case EventTakeover:
		c.takeovers.Add(1)
	case EventStoreError:
		c.storeErrors.Add(1)
	}
	if m.cfg.OnEvent != nil {
		m.onEvent(e)
	}
}

// onEvent calls Config.OnEvent and recovers its panic: the middleware may hold a claim when
// it reports an event, and a panic unwinding past it left the claim (and, with pgserver, a
// pool connection and the key's lock) held for good: every retry got 409.
func (m *Middleware) onEvent(e Event) {
	defer func() {
		if recover() != nil {
			m.n.hookPanics.Add(1)
		}
	}()
	m.cfg.OnEvent(e)
}
