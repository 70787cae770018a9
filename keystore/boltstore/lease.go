package boltstore

import (
	"bytes"
	"context"
	"errors"
	"time"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
)

// The fleet methods of the file store. One process holds the file lock, so a claim is atomic
// because it runs inside one write transaction; the rules and errors are those of every
// backend (see keystore.Store), fencing included. A claim changes only the lease fields of
// the record's JSON (owner, lease_until, fence), so schema version 1 is unchanged: a record
// written before leases existed reads as never claimed.

// Claim gives l.Owner the lease of the pending record (scope, key) with the next Fence, and
// returns the claimed record once the change is durable. Errors: keystore.ErrInvalid (bad
// lease), keystore.ErrNotFound, keystore.ErrNotPending (wrapped), *keystore.ClaimedError,
// ErrCorrupt, keystore.ErrClosed, ctx.Err(), or the commit's I/O error.
func (s *Store) Claim(ctx context.Context, scope, key string, l keystore.Lease) (*keystore.Record, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	var out *keystore.Record
	err := s.commit.do(ctx, func(tx *bbolt.Tx) error {
		records := tx.Bucket(bucketRecords)
		k := scopedKey(scope, key)
		v := records.Get(k)
		if v == nil {
			return keystore.ErrNotFound
		}
		rec, err := s.codec.decode(k, v)
		if err != nil {
			return err
		}
		if err := keystore.ClaimRefusal(rec, l); err != nil {
			return err
		}
		keystore.ApplyClaim(rec, l)
		if err := s.putRecord(records, k, rec); err != nil {
			return err
		}
		out = rec
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Renew sets the LeaseUntil of (scope, key) to until if (owner, fence) holds its lease, once
// the change is durable. Errors: keystore.ErrInvalid (empty owner, zero until),
// keystore.ErrNotFound, *keystore.FencedError, ErrCorrupt, keystore.ErrClosed, ctx.Err(), or
// the commit's I/O error.
func (s *Store) Renew(ctx context.Context, scope, key, owner string, fence int64, until time.Time) error {
	if err := keystore.CheckRenew(owner, until); err != nil {
		return err
	}
	return s.holder(ctx, scope, key, func(rec *keystore.Record) (bool, error) {
		if err := keystore.CheckHolder(rec, owner, fence); err != nil {
			return false, err
		}
		rec.LeaseUntil = until
		return true, nil
	})
}

// Release ends the lease of (owner, fence) on (scope, key), keeping the Fence; releasing a
// record already released at that fence returns nil. Errors: keystore.ErrInvalid (empty
// owner), keystore.ErrNotFound, *keystore.FencedError, ErrCorrupt, keystore.ErrClosed,
// ctx.Err(), or the commit's I/O error.
func (s *Store) Release(ctx context.Context, scope, key, owner string, fence int64) error {
	if owner == "" {
		return errors.Join(keystore.ErrInvalid, errors.New("release without an owner"))
	}
	return s.holder(ctx, scope, key, func(rec *keystore.Record) (bool, error) {
		if keystore.Released(rec, fence) {
			return false, nil
		}
		if err := keystore.CheckHolder(rec, owner, fence); err != nil {
			return false, err
		}
		rec.Owner, rec.LeaseUntil = "", time.Time{}
		return true, nil
	})
}

// holder decodes the record (scope, key) in a write transaction, lets change decide, and
// writes the record back if change reports a change.
func (s *Store) holder(ctx context.Context, scope, key string, change func(*keystore.Record) (bool, error)) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	return s.commit.do(ctx, func(tx *bbolt.Tx) error {
		records := tx.Bucket(bucketRecords)
		k := scopedKey(scope, key)
		v := records.Get(k)
		if v == nil {
			return keystore.ErrNotFound
		}
		rec, err := s.codec.decode(k, v)
		if err != nil {
			return err
		}
		changed, err := change(rec)
		if err != nil || !changed {
			return err
		}
		return s.putRecord(records, k, rec)
	})
}

// ClaimExpired claims for l.Owner up to limit pending records without a lease live at l.Now,
// oldest CreatedAt first, in one durable commit, and returns them. A record that cannot be
// decoded is skipped and left untouched (ListPage reports it), as pgstore does. Errors:
// keystore.ErrInvalid (bad lease, limit < 1), ErrCorrupt for damage of the file's pages
// (nothing claimed), keystore.ErrClosed, ctx.Err(), or the commit's I/O error.
func (s *Store) ClaimExpired(ctx context.Context, l keystore.Lease, limit int) ([]*keystore.Record, error) {
	if err := keystore.CheckClaimExpired(l, limit); err != nil {
		return nil, err
	}
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	var out []*keystore.Record
	err := s.commit.do(ctx, func(tx *bbolt.Tx) error {
		records := tx.Bucket(bucketRecords)
		// The scan decodes no record it can rule out or order from its bytes (a full decode of
		// every record made a pass over N records cost N full decodes per batch): candidates
		// are sorted like keystore.SortRecords and decoded in that order until limit orphans
		// are found.
		var cands []*keystore.Record // Scope, Key and CreatedAt only
		err := forEachRecord(records, func(k, v []byte) error {
			if surelyNotOrphaned(v, l.Now) {
				return nil
			}
			if c, ok := candidate(k, v); ok {
				cands = append(cands, c)
				return nil
			}
			rec, err := decodeSummary(k, v)
			if err != nil {
				return skipDamaged(err) // one bad record must not stop every reclaim
			}
			if keystore.Orphaned(rec, l.Now) {
				cands = append(cands, rec)
			}
			return nil
		})
		if err != nil {
			return err // nothing written yet
		}
		keystore.SortRecords(cands)
		var orphans []*keystore.Record
		for _, c := range cands {
			if len(orphans) == limit {
				break
			}
			k := scopedKey(c.Scope, c.Key)
			rec, err := s.codec.decode(k, records.Get(k))
			if err != nil {
				if err := skipDamaged(err); err != nil {
					return err // nothing written yet
				}
				continue
			}
			if keystore.Orphaned(rec, l.Now) {
				orphans = append(orphans, rec)
			}
		}
		for _, rec := range orphans {
			keystore.ApplyClaim(rec, l)
			if err := s.putRecord(records, scopedKey(rec.Scope, rec.Key), rec); err != nil {
				return err
			}
		}
		out = orphans
		return nil
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []*keystore.Record{}
	}
	return out, nil
}

// putRecord writes rec, a record decoded from the file (so valid, its secrets already
// stripped), under k. A failure aborts the transaction.
func (s *Store) putRecord(records *bbolt.Bucket, k []byte, rec *keystore.Record) error {
	v, err := s.codec.value(k, rec)
	if err != nil {
		return abort(err)
	}
	if err := records.Put(k, v); err != nil {
		return abort(err)
	}
	s.summaries.drop(k) // its value is replaced: the next update decodes this one
	return nil
}

// keepLease makes e, a record about to replace old in Update, carry old's lease fields:
// Update never changes a lease. The value is encoded again only when they differ.
func keepLease(e *encoded, old *keystore.Record) error {
	if keystore.SameLease(e.rec, old) {
		return nil
	}
	rec := *e.rec
	keystore.KeepLease(&rec, old)
	v, err := e.codec.value(e.key, &rec)
	if err != nil {
		return err
	}
	e.rec, e.value = &rec, v
	return nil
}

// surelyNotOrphaned reports, without decoding v (a record as encode wrote it), that the record
// is not pending, or is pending under a live lease, so that ClaimExpired need not decode it.
// It relies on the encoding's top-level "state", "owner" and "lease_until" string members: in
// JSON a quote inside a string is escaped, and the record's only nested objects are header
// maps (arrays as values) and bodies (base64), so these byte sequences occur nowhere else.
// Whenever it is unsure it returns false and the record is decoded.
func surelyNotOrphaned(v []byte, now time.Time) bool {
	if !bytes.Contains(v, []byte(`"state":"pending"`)) {
		return bytes.Contains(v, []byte(`"state":"`)) // another state; no state at all: decode
	}
	i := bytes.Index(v, []byte(`"lease_until":"`))
	if i < 0 || bytes.Contains(v, []byte(`"owner":""`)) || !bytes.Contains(v, []byte(`"owner":"`)) {
		return false
	}
	rest := v[i+len(`"lease_until":"`):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return false
	}
	until, err := time.Parse(time.RFC3339Nano, string(rest[:end]))
	return err == nil && until.After(now)
}

// candidate returns the scope, key and CreatedAt of the record (k, v) read from its bytes
// (the top-level "created_at" string member, see surelyNotOrphaned), ok false if they cannot
// be read so.
func candidate(k, v []byte) (*keystore.Record, bool) {
	scope, key, ok := splitScopedKey(k)
	if !ok {
		return nil, false
	}
	i := bytes.Index(v, []byte(`"created_at":"`))
	if i < 0 {
		return nil, false
	}
	rest := v[i+len(`"created_at":"`):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return nil, false
	}
	at, err := time.Parse(time.RFC3339Nano, string(rest[:end]))
	if err != nil {
		return nil, false
	}
	return &keystore.Record{Scope: scope, Key: key, CreatedAt: at}, true
}
