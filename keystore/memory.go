package keystore

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Memory is an in-process Store, safe for concurrent use. Nothing survives the process, so
// use it for tests and short-lived programs only. Records are copied on the way in and out
// (kept packed in bytes inside), so callers never share memory with the store. It holds
// every record until it is purged: a client purges finished records older than its
// Retention while it runs (Config.PurgeInterval), so under a steady load its size settles at
// about Retention's worth of calls, some 550 bytes each for a small payment. Like every
// backend, it never keeps CredentialHeaders (nor Set-Cookie in a response). The zero value
// is not usable; call NewMemory.
type Memory struct {
	mu      sync.RWMutex
	closed  bool
	records map[scopedName]*memRecord
	intents map[scopedName]string // (scope, intent) -> key
	scratch []byte                // packing buffer (memory_record.go)

	// finished lists records in the order they became terminal, for PurgeBatch
	// (memory_ext.go); peak is the most records held since the maps were last rebuilt.
	finished finishedLog
	peak     int
}

// scopedName is a key or an intent within a scope.
type scopedName struct{ scope, name string }

var _ Store = (*Memory)(nil)

// NewMemory returns an empty, open Memory store.
func NewMemory() *Memory {
	return &Memory{
		records: make(map[scopedName]*memRecord),
		intents: make(map[scopedName]string),
	}
}

// begin checks the context and the closed flag. The caller holds mu.
func (m *Memory) begin(ctx context.Context) error {
	if m.closed {
		return ErrClosed
	}
	return ctx.Err()
}

// Create stores a copy of rec. It returns ErrInvalid if rec fails Validate, ErrExists if
// (Scope, Key) or a non-empty (Scope, Intent) is taken, ErrClosed after Close, or ctx.Err().
func (m *Memory) Create(ctx context.Context, rec *Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.begin(ctx); err != nil {
		return err
	}
	if err := rec.Validate(); err != nil {
		return err
	}
	k := scopedName{rec.Scope, rec.Key}
	if _, ok := m.records[k]; ok {
		return ErrExists
	}
	if rec.Intent != "" {
		if _, ok := m.intents[scopedName{rec.Scope, rec.Intent}]; ok {
			return ErrExists
		}
		m.intents[scopedName{rec.Scope, rec.Intent}] = rec.Key
	}
	m.store(k, newMemRecord(rec, &m.scratch), false)
	return nil
}

// Get returns a copy of the record for (scope, key), ErrNotFound, ErrClosed or ctx.Err().
func (m *Memory) Get(ctx context.Context, scope, key string) (*Record, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if err := m.begin(ctx); err != nil {
		return nil, err
	}
	k := scopedName{scope, key}
	rec, ok := m.records[k]
	if !ok {
		return nil, ErrNotFound
	}
	return rec.export(k), nil
}

// GetByIntent returns a copy of the record for (scope, intent), ErrNotFound (also for an
// empty intent), ErrClosed or ctx.Err().
func (m *Memory) GetByIntent(ctx context.Context, scope, intent string) (*Record, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if err := m.begin(ctx); err != nil {
		return nil, err
	}
	key, ok := m.intents[scopedName{scope, intent}]
	if !ok || intent == "" {
		return nil, ErrNotFound
	}
	k := scopedName{scope, key}
	return m.records[k].export(k), nil
}

// Update replaces the record matched by (rec.Scope, rec.Key) with a copy of rec. It returns
// ErrInvalid if rec fails Validate or changes Intent or Fingerprint, ErrNotFound if absent,
// ErrClosed after Close, or ctx.Err().
func (m *Memory) Update(ctx context.Context, rec *Record) error {
	return m.update(ctx, rec, "")
}

// update is Update, and UpdateFromState when from is set.
func (m *Memory) update(ctx context.Context, rec *Record, from State) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.begin(ctx); err != nil {
		return err
	}
	if err := rec.Validate(); err != nil {
		return err
	}
	k := scopedName{rec.Scope, rec.Key}
	old, ok := m.records[k]
	if !ok {
		return ErrNotFound
	}
	cur := old.rules(k)
	cur.Fingerprint = old.fingerprintFor(rec.Fingerprint)
	if err := CheckImmutable(&cur, rec); err != nil {
		return err
	}
	if from != "" && old.state != from {
		return StateChanged(old.state, from)
	}
	stored := old
	if old.state.Terminal() { // listed in the finished log by this pointer: keep that version
		stored = new(memRecord)
	}
	stored.set(rec, &m.scratch)
	stored.setLease(&cur) // the lease belongs to Claim, Renew and Release
	m.store(k, stored, stored == old)
	return nil
}

// List returns copies of the records in any of states (all if none), sorted by CreatedAt,
// then Key, then Scope. It returns ErrClosed after Close or ctx.Err().
func (m *Memory) List(ctx context.Context, states ...State) ([]*Record, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if err := m.begin(ctx); err != nil {
		return nil, err
	}
	out := make([]*Record, 0, len(m.records))
	for k, rec := range m.records {
		if len(states) == 0 || slices.Contains(states, rec.state) {
			out = append(out, rec.export(k))
		}
	}
	SortRecords(out)
	return out, nil
}

// Purge deletes terminal records (succeeded, failed) whose UpdatedAt is before cutoff, with
// their intents, and returns how many it deleted. It returns ErrClosed after Close or
// ctx.Err().
func (m *Memory) Purge(ctx context.Context, cutoff time.Time) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.begin(ctx); err != nil {
		return 0, err
	}
	n := 0
	for k, rec := range m.records {
		if rec.purgeable(cutoff) {
			delete(m.records, k)
			if rec.intent != "" {
				delete(m.intents, scopedName{k.scope, rec.intent})
			}
			n++
		}
	}
	return n, nil
}

// Close releases the maps. Every later call, Close included, returns ErrClosed.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.closed = true
	m.records, m.intents, m.finished, m.scratch = nil, nil, finishedLog{}, nil
	return nil
}
