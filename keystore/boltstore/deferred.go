package boltstore

import (
	"context"
	"sync"
	"time"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
)

// DefaultFlushDelay is the longest a deferred write (UpdateDeferred) waits for a commit when
// Options.FlushDelay is not set.
const DefaultFlushDelay = 50 * time.Millisecond

var _ keystore.DeferredUpdater = (*Store)(nil)

// overlay holds the deferred writes not committed yet, so that reads see them at once.
type overlay struct {
	mu   sync.RWMutex
	recs map[string]*op // records bucket key -> the latest deferred op for it
	vals map[*op]deferredValue
}

// deferredValue is what a deferred op will write under key: a value the commit never modifies
// (keepLease makes a new one), so reads need no lock to decode it; and the locations of the
// record's times as the caller gave them, which the value keeps only as offsets.
type deferredValue struct {
	key, value []byte
	codec      *codec
	locs       [3]*time.Location // CreatedAt, UpdatedAt, LeaseUntil
}

// record decodes the version, its times in the caller's locations: a read before the commit
// returns what it returned when the overlay kept a copy of the caller's record (but for the
// monotonic clock readings, which no stored time has).
func (d deferredValue) record() (*keystore.Record, error) {
	rec, err := d.codec.decode(d.key, d.value)
	if err != nil {
		return nil, err
	}
	rec.CreatedAt, rec.UpdatedAt, rec.LeaseUntil = rec.CreatedAt.In(d.locs[0]), rec.UpdatedAt.In(d.locs[1]), rec.LeaseUntil.In(d.locs[2])
	return rec, nil
}

func (v *overlay) put(o *op, e *encoded) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.recs == nil {
		v.recs, v.vals = make(map[string]*op), make(map[*op]deferredValue)
	}
	if old := v.recs[string(o.key)]; old != nil {
		delete(v.vals, old)
	}
	v.recs[string(o.key)] = o
	v.vals[o] = deferredValue{key: e.key, value: e.value, codec: e.codec,
		locs: [3]*time.Location{e.rec.CreatedAt.Location(), e.rec.UpdatedAt.Location(), e.rec.LeaseUntil.Location()}}
}

// versions maps records bucket keys to deferred versions not committed as of a read
// transaction; get returns the one under k, decoded from the value its commit will write
// (deferredValue.record), or nil. Its error is the decoding's (ErrCorrupt,
// or a sealed body the key ring cannot open), which a value this store just made never has.
type versions map[string]deferredValue

func (m versions) get(k []byte) (*keystore.Record, error) {
	if d, ok := m[string(k)]; ok {
		return d.record()
	}
	return nil, nil
}

// viewOverlay runs fn in a read transaction with the deferred writes that transaction does
// not see. The overlay is copied while its read lock is held from before the transaction
// begins, and settle takes the write lock after a commit: so a deferred write is either
// committed before the transaction began or in the copy, never neither.
func (s *Store) viewOverlay(fn func(tx *bbolt.Tx, ov versions) error) error {
	return s.viewOverlayOf(nil, fn)
}

// viewOverlayOf is viewOverlay with only the deferred version of the record under key k
// when k is not nil: a Get copies one entry instead of every deferred write (there are as
// many as calls in flight), which matters under many concurrent calls.
func (s *Store) viewOverlayOf(k []byte, fn func(tx *bbolt.Tx, ov versions) error) error {
	v := &s.pending
	v.mu.RLock()
	locked := true
	defer func() {
		if locked {
			v.mu.RUnlock()
		}
	}()
	return s.view(func(tx *bbolt.Tx) error {
		var ov versions
		switch {
		case len(v.recs) == 0:
		case k != nil:
			if o := v.recs[string(k)]; o != nil {
				ov = versions{string(k): v.vals[o]}
			}
		default:
			ov = make(versions, len(v.recs))
			for k, o := range v.recs {
				ov[k] = v.vals[o]
			}
		}
		v.mu.RUnlock()
		locked = false
		return fn(tx, ov)
	})
}

// settle forgets the deferred ops of a finished commit, committed or lost alike: from now
// on reads find in the file whatever the commit left there.
func (v *overlay) settle(batch []*op) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, o := range batch {
		if !o.deferred {
			continue
		}
		if v.recs[string(o.key)] == o {
			delete(v.recs, string(o.key))
		}
		delete(v.vals, o)
	}
}

// UpdateDeferred is Update without the wait for durability (keystore.DeferredUpdater). It
// returns, once the new version is visible to Get, GetByIntent and List, the errors of
// Update's checks that need no read (keystore.ErrInvalid, keystore.ErrClosed, ctx.Err(), a
// write refused after damage was found). The write is committed with the next commit of any
// other write, or by a flush at most Options.FlushDelay (default 50 ms) later, or by Close.
// If that commit finds the record missing or changed in an immutable field, or fails, the
// deferred write is dropped and the stored record stays as it was.
func (s *Store) UpdateDeferred(ctx context.Context, rec *keystore.Record) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	e, err := encode(rec, s.secret, &s.codec)
	if err != nil {
		return err
	}
	if err := s.commit.refused(); err != nil {
		return err
	}
	o := &op{deferred: true, key: e.key, apply: func(tx *bbolt.Tx) error { return s.applyUpdate(tx, e, "") }}
	c := &s.commit
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return keystore.ErrClosed
	}
	s.pending.put(o, e)
	c.queue = append(c.queue, o)
	if !c.running {
		c.armFlushLocked()
	}
	return nil
}

// armFlushLocked starts the flush timer unless it is running. c.mu is held.
func (c *committer) armFlushLocked() {
	if c.flushArmed || c.closed {
		return
	}
	c.flushArmed = true
	time.AfterFunc(c.flushDelay, c.flush)
}

// flush commits the queued deferred writes unless a leader is about to.
func (c *committer) flush() {
	c.mu.Lock()
	c.flushArmed = false
	if c.running || c.closed || len(c.queue) == 0 {
		c.mu.Unlock()
		return
	}
	c.running = true
	c.mu.Unlock()
	c.commit()
}
