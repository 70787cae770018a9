package boltstore

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
)

// Create stores rec, without its secret headers, and returns once it is durable. It returns
// an error wrapping keystore.ErrInvalid if rec fails Validate, holds a string that is not
// valid UTF-8 (JSON could not store it unchanged) or a scope plus key longer than 32 KiB;
// keystore.ErrExists if (Scope, Key), or a non-empty (Scope, Intent), is taken;
// keystore.ErrClosed after Close; ctx.Err() if ctx ends before the write is committing; or
// the commit's I/O error. Nothing is written when it returns an error.
func (s *Store) Create(ctx context.Context, rec *keystore.Record) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	e, err := encode(rec, s.secret, &s.codec)
	if err != nil {
		return err
	}
	return s.commit.do(ctx, func(tx *bbolt.Tx) error {
		cur := &s.commit.cursors
		if cur.get(tx, cursorRecords, e.key) != nil {
			return keystore.ErrExists
		}
		if e.intent != nil {
			// A damaged entry of this intent is ErrCorrupt, never taken for a free intent.
			if _, found, err := lookupIntent(tx, e.intent); err != nil || found {
				return cmp.Or(err, keystore.ErrExists)
			}
		}
		if err := tx.Bucket(bucketRecords).Put(e.key, e.value); err != nil {
			return abort(err)
		}
		if e.intent != nil {
			if err := putIntent(tx, e.intent, e.rec.Key); err != nil {
				return abort(err)
			}
		}
		if err := reindexWith(tx, cur, e.key, nil, e.rec); err != nil {
			return err
		}
		s.summaries.put(e)
		return nil
	})
}

// Update replaces the record (rec.Scope, rec.Key), without its secret headers, and returns
// once it is durable. It returns keystore.ErrNotFound if the record does not exist; an error
// wrapping keystore.ErrInvalid if rec is invalid (see Create) or changes Intent or
// Fingerprint; ErrCorrupt if the stored record does not decode; keystore.ErrClosed after
// Close; ctx.Err() if ctx ends before the write is committing; or the commit's I/O error.
func (s *Store) Update(ctx context.Context, rec *keystore.Record) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	e, err := encode(rec, s.secret, &s.codec)
	if err != nil {
		return err
	}
	return s.commit.do(ctx, func(tx *bbolt.Tx) error { return s.applyUpdate(tx, e, "") })
}

// UpdateFromState is Update, done only while the stored record's State is from
// (keystore.StateGuardedUpdater), checked in the write's transaction; otherwise it writes
// nothing and returns an error wrapping keystore.ErrStateChanged.
func (s *Store) UpdateFromState(ctx context.Context, rec *keystore.Record, from keystore.State) error {
	if !from.Valid() {
		return fmt.Errorf("%w: UpdateFromState from state %q", keystore.ErrInvalid, from)
	}
	if err := s.begin(ctx); err != nil {
		return err
	}
	e, err := encode(rec, s.secret, &s.codec)
	if err != nil {
		return err
	}
	return s.commit.do(ctx, func(tx *bbolt.Tx) error { return s.applyUpdate(tx, e, from) })
}

// applyUpdate is the write of Update, UpdateDeferred and UpdateFromState (from set), inside
// the shared transaction.
func (s *Store) applyUpdate(tx *bbolt.Tx, e *encoded, from keystore.State) error {
	cur := &s.commit.cursors
	v := cur.get(tx, cursorRecords, e.key)
	if v == nil {
		return keystore.ErrNotFound
	}
	old := s.summaries.get(e.key, v)
	if old == nil {
		var err error
		if old, err = decodeSummary(e.key, v); err != nil {
			return err
		}
	}
	if err := keystore.CheckImmutable(old, e.rec); err != nil {
		return err
	}
	if from != "" && old.State != from {
		return keystore.StateChanged(old.State, from)
	}
	if err := keepLease(e, old); err != nil {
		return err
	}
	if err := tx.Bucket(bucketRecords).Put(e.key, e.value); err != nil {
		return abort(err)
	}
	if err := reindexWith(tx, cur, e.key, old, e.rec); err != nil {
		return err
	}
	s.summaries.put(e)
	return nil
}

// Purge deletes the terminal records (succeeded, failed) whose UpdatedAt is before cutoff,
// with their intent entries, in one durable commit, and returns how many it deleted. It
// returns ErrCorrupt (deleting nothing) if a stored record does not decode,
// keystore.ErrClosed after Close, ctx.Err() if ctx ends before the purge is committing, or the
// commit's I/O error.
func (s *Store) Purge(ctx context.Context, cutoff time.Time) (int, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	var n int
	err := s.commit.do(ctx, func(tx *bbolt.Tx) error {
		records := tx.Bucket(bucketRecords)
		var keys, intentKeys [][]byte
		err := forEachRecord(records, func(k, v []byte) error {
			rec, err := decodeSummary(k, v)
			if err != nil {
				return err
			}
			if keystore.Purgeable(rec, cutoff) {
				keys = append(keys, slices.Clone(k))
				if rec.Intent != "" {
					intentKeys = append(intentKeys, scopedKey(rec.Scope, rec.Intent))
				}
			}
			return nil
		})
		if err != nil {
			return err // nothing deleted yet
		}
		for _, k := range keys {
			if err := records.Delete(k); err != nil {
				return abort(err)
			}
		}
		for _, k := range intentKeys {
			if err := deleteIntent(tx, k); err != nil {
				return abort(err)
			}
		}
		n = len(keys)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Get returns the record for (scope, key). It returns keystore.ErrNotFound if there is none,
// ErrCorrupt if it does not decode, keystore.ErrClosed after Close, or ctx.Err().
func (s *Store) Get(ctx context.Context, scope, key string) (*keystore.Record, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	k := scopedKey(scope, key)
	var rec *keystore.Record
	err := s.viewOverlayOf(k, func(tx *bbolt.Tx, ov versions) error {
		var err error
		if rec, err = ov.get(k); rec != nil || err != nil { // a deferred write not committed yet
			return err
		}
		v := tx.Bucket(bucketRecords).Get(k)
		if v == nil {
			return keystore.ErrNotFound
		}
		rec, err = s.codec.decode(k, v)
		return err
	})
	return rec, s.commit.note(dbError(err))
}

// GetByIntent returns the record created with (scope, intent). It returns
// keystore.ErrNotFound if there is none (always for an empty intent), ErrCorrupt if the
// record does not decode or the intent index names a missing record, keystore.ErrClosed after
// Close, or ctx.Err().
func (s *Store) GetByIntent(ctx context.Context, scope, intent string) (*keystore.Record, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	if intent == "" {
		return nil, keystore.ErrNotFound
	}
	var rec *keystore.Record
	err := s.viewOverlay(func(tx *bbolt.Tx, ov versions) error {
		key, found, err := lookupIntent(tx, scopedKey(scope, intent))
		if err != nil {
			return err
		}
		if !found {
			return keystore.ErrNotFound
		}
		if len(key) > bbolt.MaxKeySize {
			return structural(fmt.Errorf("%w: intent (%q, %q) names a key of %d bytes", ErrCorrupt, scope, intent, len(key)))
		}
		k := scopedKey(scope, key)
		if rec, err = ov.get(k); rec != nil || err != nil { // a deferred write not committed yet
			return err
		}
		v := tx.Bucket(bucketRecords).Get(k)
		if v == nil {
			return fmt.Errorf("%w: intent (%q, %q) names missing key %q", ErrCorrupt, scope, intent, key)
		}
		if rec, err = s.codec.decode(k, v); err == nil && rec.Intent != intent {
			// The index and the record disagree (a damaged byte in either): the record found
			// is another intent's, and returning it would end this intent with its outcome.
			rec, err = nil, fmt.Errorf("%w: intent (%q, %q) names key %q, whose record has intent %q", ErrCorrupt, scope, intent, key, rec.Intent)
		}
		return err
	})
	return rec, s.commit.note(dbError(err))
}

// List returns the records in any of states (every record if none is given), sorted by
// CreatedAt, then Key, then Scope. It returns ErrCorrupt if a record does not decode,
// keystore.ErrClosed after Close, or ctx.Err().
func (s *Store) List(ctx context.Context, states ...keystore.State) ([]*keystore.Record, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	var out []*keystore.Record
	err := s.viewOverlay(func(tx *bbolt.Tx, ov versions) error {
		return forEachRecord(tx.Bucket(bucketRecords), func(k, v []byte) error {
			rec, err := ov.get(k) // a deferred write not committed yet
			if err != nil {
				return err
			}
			if rec == nil {
				if rec, err = s.codec.decode(k, v); err != nil {
					return err
				}
			}
			if len(states) == 0 || slices.Contains(states, rec.State) {
				out = append(out, rec)
			}
			return nil
		})
	})
	if err != nil {
		return nil, s.commit.note(dbError(err))
	}
	keystore.SortRecords(out)
	return out, nil
}

// forEachRecord calls fn for each key and value of records, in key order. bbolt returns the
// keys of an intact bucket in strictly increasing order; a key that is not greater than the
// one before means damaged pages (Open rules out pages that lead back into the tree, where
// ForEach would loop forever, but not damage done to the file after Open), and is returned as
// ErrCorrupt. So is a key longer than bbolt allows, before it is copied.
func forEachRecord(records *bbolt.Bucket, fn func(k, v []byte) error) error {
	var prev []byte
	return records.ForEach(func(k, v []byte) error {
		if len(k) > bbolt.MaxKeySize {
			return structural(fmt.Errorf("%w: record key of %d bytes, after %q", ErrCorrupt, len(k), clip(prev)))
		}
		if prev != nil && bytes.Compare(k, prev) <= 0 {
			return structural(fmt.Errorf("%w: record key %q follows %q: the records are out of order", ErrCorrupt, clip(k), clip(prev)))
		}
		prev = append(prev[:0], k...)
		return fn(k, v)
	})
}

// begin returns keystore.ErrClosed after Close, else ctx.Err().
func (s *Store) begin(ctx context.Context) error {
	if s.closed.Load() {
		return keystore.ErrClosed
	}
	if err := s.commit.watch.err(); err != nil {
		return err
	}
	return ctx.Err()
}
