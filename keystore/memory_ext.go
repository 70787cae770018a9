package keystore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Memory's optional capabilities: deferred writes (trivially durable: nothing is), paged
// listing, and a retention purge in O(batch) steps that keeps the store bounded under a
// steady load.

var (
	_ DeferredUpdater     = (*Memory)(nil)
	_ Pager               = (*Memory)(nil)
	_ BatchPurger         = (*Memory)(nil)
	_ StateGuardedUpdater = (*Memory)(nil)
)

// store puts rec under k (unless inPlace: rec already is k's value) and notes it for
// PurgeBatch when it is terminal. m.mu is held.
func (m *Memory) store(k scopedName, rec *memRecord, inPlace bool) {
	if !inPlace { // an update in place is already in the map: a second hash of a big map costs
		m.records[k] = rec
		m.peak = max(m.peak, len(m.records))
	}
	if rec.state.Terminal() {
		m.finished.push(finishedEntry{k, rec})
	}
}

// UpdateDeferred is Update: a Memory write is as durable as it will ever be when it returns.
func (m *Memory) UpdateDeferred(ctx context.Context, rec *Record) error { return m.Update(ctx, rec) }

// UpdateFromState is Update, done only while the stored record's State is from
// (keystore.StateGuardedUpdater); otherwise an error wrapping ErrStateChanged.
func (m *Memory) UpdateFromState(ctx context.Context, rec *Record, from State) error {
	if !from.Valid() {
		return fmt.Errorf("%w: UpdateFromState from state %q", ErrInvalid, from)
	}
	return m.update(ctx, rec, from)
}

// memoryCursor encodes (scope, key) so that cursors compare like the (scope, key) pairs.
func memoryCursor(k scopedName) Cursor {
	return Cursor(strconv.Itoa(len(k.scope)) + ":" + k.scope + k.name)
}

func parseMemoryCursor(c Cursor) (scopedName, bool) {
	n, rest, ok := strings.Cut(string(c), ":")
	l, err := strconv.Atoi(n)
	if !ok || err != nil || l < 0 || l > len(rest) {
		return scopedName{}, false
	}
	return scopedName{rest[:l], rest[l:]}, true
}

func compareNames(a, b scopedName) int {
	if c := strings.Compare(a.scope, b.scope); c != 0 {
		return c
	}
	return strings.Compare(a.name, b.name)
}

// ListPage returns copies of at most limit records in states (all if none) after cursor
// after, in (scope, key) order. Memory never holds an undecodable record, so Page.Damaged is
// always empty. It returns ErrInvalid for a cursor it did not issue, ErrClosed after Close,
// or ctx.Err().
func (m *Memory) ListPage(ctx context.Context, states []State, after Cursor, limit int) (Page, error) {
	if limit <= 0 {
		limit = DefaultPageSize
	}
	var from scopedName
	if after != "" {
		var ok bool
		if from, ok = parseMemoryCursor(after); !ok {
			return Page{}, ErrInvalid
		}
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if err := m.begin(ctx); err != nil {
		return Page{}, err
	}
	var keys []scopedName
	for k, rec := range m.records {
		if (after == "" || compareNames(k, from) > 0) && (len(states) == 0 || slices.Contains(states, rec.state)) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, compareNames)
	var p Page
	if len(keys) > limit {
		keys = keys[:limit]
		p.Next = memoryCursor(keys[limit-1])
	}
	p.Records = make([]*Record, len(keys))
	for i, k := range keys {
		p.Records[i] = m.records[k].export(k)
	}
	return p, nil
}

// PurgeBatch examines at most limit records in the order they became terminal, from the
// cursor after (a position in that order), and deletes those last updated before cutoff; next
// is "" once the pass has reached the newest. It costs O(limit) whatever the store holds, so a
// steady load with a retention purge keeps Memory bounded; when the store has shrunk to a
// quarter of its peak, the maps are rebuilt so that their memory is released too. It returns
// ErrInvalid for a cursor it did not issue, ErrClosed after Close, or ctx.Err().
func (m *Memory) PurgeBatch(ctx context.Context, cutoff time.Time, after Cursor, limit int) (int, Cursor, error) {
	if limit <= 0 {
		limit = DefaultPageSize
	}
	var start int64
	if after != "" {
		var err error
		if start, err = strconv.ParseInt(string(after), 10, 64); err != nil || start < 0 {
			return 0, "", ErrInvalid
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.begin(ctx); err != nil {
		return 0, "", err
	}
	f := &m.finished
	idx := int(min(max(start-f.base, 0), int64(f.len())))
	end := min(idx+limit, f.len())
	n := 0
	for i := idx; i < end; i++ {
		e := f.at(i)
		switch {
		case e.rec == nil: // already dropped
		case m.records[e.k] != e.rec: // changed or deleted since it became terminal
			e.rec = nil
			f.tombs++
		case e.rec.purgeable(cutoff):
			delete(m.records, e.k)
			if e.rec.intent != "" {
				delete(m.intents, scopedName{e.k.scope, e.rec.intent})
			}
			e.rec = nil
			f.tombs++
			n++
		}
	}
	var next Cursor
	if end < f.len() {
		next = Cursor(strconv.FormatInt(f.base+int64(end), 10))
	}
	f.trim()
	m.compactLocked()
	return n, next, nil
}

// compactLocked rebuilds the maps once they hold a quarter of their peak: a Go map keeps the
// memory of deleted entries. m.mu is held.
func (m *Memory) compactLocked() {
	if m.peak < 4096 || len(m.records) > m.peak/4 {
		return
	}
	records := make(map[scopedName]*memRecord, len(m.records))
	for k, v := range m.records {
		records[k] = v
	}
	intents := make(map[scopedName]string, len(m.intents))
	for k, v := range m.intents {
		intents[k] = v
	}
	m.records, m.intents, m.peak = records, intents, len(records)
}
