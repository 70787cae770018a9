package boltstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
)

var (
	_ keystore.Pager               = (*Store)(nil)
	_ keystore.BatchPurger         = (*Store)(nil)
	_ keystore.StateGuardedUpdater = (*Store)(nil)
)

// scan calls fn for at most limit records after the cursor after, in key order, and returns
// the cursor of the next record to examine ("" at the end). Structural damage stops it.
func scan(tx *bbolt.Tx, after keystore.Cursor, limit int, fn func(k, v []byte) error) (keystore.Cursor, error) {
	c := tx.Bucket(bucketRecords).Cursor()
	var k, v []byte
	if after == "" {
		k, v = c.First()
	} else {
		k, v = c.Seek([]byte(after))
		if k != nil && bytes.Equal(k, []byte(after)) {
			k, v = c.Next()
		}
	}
	var prev []byte
	for n := 0; k != nil; k, v = c.Next() {
		if len(k) > bbolt.MaxKeySize {
			return "", structural(fmt.Errorf("%w: record key of %d bytes, after %q", ErrCorrupt, len(k), clip(prev)))
		}
		if prev != nil && bytes.Compare(k, prev) <= 0 {
			return "", structural(fmt.Errorf("%w: record key %q follows %q: the records are out of order", ErrCorrupt, clip(k), clip(prev)))
		}
		if n == limit {
			return keystore.Cursor(prev), nil
		}
		prev = append(prev[:0], k...)
		if v == nil { // a nested bucket: not a record
			continue
		}
		if err := fn(k, v); err != nil {
			return "", err
		}
		n++
	}
	return "", nil
}

// damaged describes the undecodable record under k.
func damaged(k []byte, err error) keystore.DamagedRecord {
	scope, key, ok := splitScopedKey(k)
	if !ok {
		key = string(clip(k))
	}
	return keystore.DamagedRecord{Scope: scope, Key: key, Err: err}
}

// ListPage examines at most limit records (keystore.DefaultPageSize if limit <= 0) after the
// cursor after, in key order, and returns those in states (every state if none). A record
// that does not decode (ErrCorrupt) is reported in Page.Damaged whatever its state and left
// as it is; the listing goes on. Deferred writes not committed yet are seen. It returns
// ErrCorrupt if the pages themselves are damaged, keystore.ErrClosed after Close, or
// ctx.Err().
func (s *Store) ListPage(ctx context.Context, states []keystore.State, after keystore.Cursor, limit int) (keystore.Page, error) {
	if err := s.begin(ctx); err != nil {
		return keystore.Page{}, err
	}
	if limit <= 0 {
		limit = keystore.DefaultPageSize
	}
	var p keystore.Page
	err := s.viewOverlay(func(tx *bbolt.Tx, ov versions) (err error) {
		p.Next, err = scan(tx, after, limit, func(k, v []byte) error {
			rec, err := ov.get(k) // a deferred write not committed yet
			if err != nil {
				return err
			}
			if rec == nil {
				if rec, err = s.codec.decode(k, v); err != nil {
					if _, ok := errors.AsType[*structuralError](err); ok {
						return err
					}
					p.Damaged = append(p.Damaged, damaged(k, err))
					return nil
				}
			}
			if len(states) == 0 || slices.Contains(states, rec.State) {
				p.Records = append(p.Records, rec)
			}
			return nil
		})
		return err
	})
	if err != nil {
		return keystore.Page{}, s.commit.note(dbError(err))
	}
	return p, nil
}

// PurgeBatch examines at most limit records (keystore.DefaultPageSize if limit <= 0) after
// the cursor after, in key order, and deletes those that are terminal and last updated
// before cutoff, with their intent entries, in durable commits that delete at most
// maxPurgePerCommit (32) records each; the examination runs in a read transaction, outside
// the commits, so concurrent writes wait at most for one small slice. Records that do not
// decode are skipped and left as they are. It returns how many it deleted and the cursor to
// continue from ("" when the pass has reached the end); ErrCorrupt if the pages are damaged,
// keystore.ErrClosed after Close, ctx.Err(), or a commit's I/O error (then the slices
// committed before it stay deleted, and the count says how many records they held).
func (s *Store) PurgeBatch(ctx context.Context, cutoff time.Time, after keystore.Cursor, limit int) (int, keystore.Cursor, error) {
	if err := s.begin(ctx); err != nil {
		return 0, "", err
	}
	if limit <= 0 {
		limit = keystore.DefaultPageSize
	}
	var keys [][]byte
	var next keystore.Cursor
	err := s.view(func(tx *bbolt.Tx) (err error) {
		next, err = scan(tx, after, limit, func(k, v []byte) error {
			if rec, err := decodeSummary(k, v); err == nil && keystore.Purgeable(rec, cutoff) {
				keys = append(keys, slices.Clone(k))
			}
			return nil
		})
		return err
	})
	if err != nil {
		return 0, "", s.commit.note(dbError(err))
	}
	total := 0
	for len(keys) > 0 {
		slice := keys[:min(len(keys), maxPurgePerCommit)]
		keys = keys[len(slice):]
		n, err := s.purgeKeys(ctx, cutoff, slice)
		total += n
		if err != nil {
			return total, "", err
		}
	}
	return total, next, nil
}

// maxPurgePerCommit bounds the records one commit of PurgeBatch deletes. The deletes run in
// the commit that the calls' writes queued meanwhile share, and bbolt rebalances and writes
// the pages they touch at its end: a slice this small keeps what a call waits for behind a
// purge to about one more page or two, where a batch of 256 deletes made purging visible in
// the calls' p99.9.
const maxPurgePerCommit = 32

// purgeKeys deletes, in one durable commit, those of the records under keys (in key order)
// that are still terminal and last updated before cutoff, with their intent entries, and
// returns how many it deleted.
func (s *Store) purgeKeys(ctx context.Context, cutoff time.Time, keys [][]byte) (int, error) {
	n := 0
	err := s.commit.do(ctx, func(tx *bbolt.Tx) error {
		records := tx.Bucket(bucketRecords)
		n = 0
		for _, k := range keys {
			v := records.Get(k)
			if v == nil {
				continue
			}
			rec, err := decodeSummary(k, v) // changed since the scan?
			if err != nil || !keystore.Purgeable(rec, cutoff) {
				continue
			}
			if err := records.Delete(k); err != nil {
				return abort(err)
			}
			if rec.Intent != "" {
				if err := deleteIntent(tx, scopedKey(rec.Scope, rec.Intent)); err != nil {
					return abort(err)
				}
			}
			n++
		}
		if n == 0 {
			return errNothingToPurge
		}
		return nil
	})
	if errors.Is(err, errNothingToPurge) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return n, nil
}

// errNothingToPurge is a batch whose records all changed between the scan and the commit;
// as a logical error it writes nothing.
var errNothingToPurge = errors.New("boltstore: nothing to purge")
