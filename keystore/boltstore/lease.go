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
// the record's JSON (owner, lease_until, fence), and moves the record's entry in the pending
// index (index.go); a record written before leases existed reads as never claimed.

// Claim gives l.Owner the lease of the pending record (scope, key) with the next Fence, and
// returns the claimed record once the change is durable. Errors: keystore.ErrInvalid (bad
// lease), keystore.ErrNotFound, keystore.ErrNotPending (wrapped), *keystore.ClaimedError,
// ErrCorrupt, keystore.ErrClosed, ctx.Err(), or the commit's I/O error.
func (s *Store) Claim(ctx context.Context, scope, key string, l keystore.Lease) (*keystore.Record, error) {
	return s.claimOne(ctx, scope, key, l, keystore.ClaimRefusal)
}

// claimOne gives l.Owner the lease of the record (scope, key), with the next Fence, unless
// refusal says why not (keystore.ClaimRefusal for a pending record, ManualClaimRefusal for a
// manual one), and returns the claimed record once durable.
func (s *Store) claimOne(ctx context.Context, scope, key string, l keystore.Lease, refusal func(*keystore.Record, keystore.Lease) error) (*keystore.Record, error) {
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
		if err := refusal(rec, l); err != nil {
			return err
		}
		old := indexFields(rec)
		keystore.ApplyClaim(rec, l)
		if err := s.putRecord(tx, k, old, rec); err != nil {
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
		old := indexFields(rec)
		changed, err := change(rec)
		if err != nil || !changed {
			return err
		}
		return s.putRecord(tx, k, old, rec)
	})
}

// ClaimExpired claims for l.Owner up to limit pending records without a lease live at l.Now,
// oldest CreatedAt first, and returns them once the claim is durable. It reads the pending
// index (index.go), not every record: first, in commits of at most maxExpiryMoves entries, it
// moves the leases that expired by l.Now to the index of unleased records, then claims the
// oldest of those, at most maxClaimsPerCommit (128) per commit, each decoded and encoded
// before its commit where it can be (claimprep.go), so a call costs time in proportion to
// limit (and to the leases that expired since the last call), whatever the number of
// records, and no commit of it holds the writers behind it for long. A record that
// cannot be decoded is skipped and left untouched (ListPage reports it), as pgstore does.
// Errors (nothing claimed; when a later commit of a large limit fails, the records claimed by
// the earlier ones are returned without the error): keystore.ErrInvalid (bad lease,
// limit < 1), ErrCorrupt for damage of the file's pages, keystore.ErrClosed, ctx.Err(), or the
// commit's I/O error.
func (s *Store) ClaimExpired(ctx context.Context, l keystore.Lease, limit int) ([]*keystore.Record, error) {
	if err := keystore.CheckClaimExpired(l, limit); err != nil {
		return nil, err
	}
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	out := []*keystore.Record{}
	var pre map[string]*preparedClaim
	for len(out) < limit {
		var got []*keystore.Record
		more := false
		n := min(limit-len(out), maxClaimsPerCommit)
		if pre == nil { // kept over commits that only move expired leases
			pre = s.prepareClaims(l, n)
		}
		err := s.commit.do(ctx, func(tx *bbolt.Tx) error {
			got, more = nil, false
			moved, err := expireLeases(tx, l.Now, maxExpiryMoves)
			if err != nil {
				return err
			}
			if moved == maxExpiryMoves { // maybe more: claim in a commit of its own
				more = true
				return nil
			}
			got, err = s.claimOrphans(tx, l, n, pre)
			return err
		})
		if !more {
			pre = nil
		}
		if err != nil {
			if len(out) > 0 { // the records claimed so far are claimed: hand them out
				return out, nil
			}
			return nil, err
		}
		out = append(out, got...)
		if !more && len(got) < n {
			break
		}
	}
	return out, nil
}

// maxClaimsPerCommit bounds the records one commit of ClaimExpired claims (a larger limit
// takes several commits): each is a record decoded, encoded and rewritten (a page of the
// file, with random keys), about 25 µs of the commit every waiting writer shares, plus the
// page's write. Recover asks for at most RecoverConcurrency × 8 (128 by default) at a time.
const maxClaimsPerCommit = 128

// claimOrphans claims for l.Owner the oldest (CreatedAt, then Key, then Scope) up to limit
// records of the "unleased" index that are orphaned at l.Now. It reads the index in key order
// (CreatedAt, then the records key) and decodes each record it finds there, unless pre holds
// a claim prepared from exactly its stored value (claimprep.go): those still orphaned are
// taken, records with a lease live at l.Now (moved here by a caller whose clock was ahead)
// are skipped, and entries naming no pending record at that CreatedAt are deleted.
func (s *Store) claimOrphans(tx *bbolt.Tx, l keystore.Lease, limit int, pre map[string]*preparedClaim) ([]*keystore.Record, error) {
	records, unleased := tx.Bucket(bucketRecords), tx.Bucket(bucketUnleased)
	var orphans []*keystore.Record
	var taken map[*keystore.Record]*preparedClaim // orphans whose prepared claim holds
	var stale [][]byte
	var prev, last []byte
	c := unleased.Cursor()
	for ik, _ := c.First(); ik != nil; ik, _ = c.Next() {
		if err := checkIndexKey("unleased", ik, prev, timeKeyLen); err != nil {
			return nil, err
		}
		prev = ik
		// Past limit only while CreatedAt ties with the last one taken: ties are ordered by
		// Key, then Scope, which the index's records key order is not.
		if len(orphans) >= limit && !bytes.Equal(ik[:timeKeyLen], last) {
			break
		}
		k := ik[timeKeyLen:]
		v := records.Get(k)
		if v == nil {
			stale = append(stale, bytes.Clone(ik))
			continue
		}
		if p := pre[string(k)]; p != nil && bytes.Equal(p.old, v) && timeOfKey(ik).Equal(storedInstant(p.claimed.CreatedAt)) {
			// Prepared from this very value: pending and orphaned at l.Now.
			if taken == nil {
				taken = make(map[*keystore.Record]*preparedClaim)
			}
			taken[p.claimed] = p
			orphans = append(orphans, p.claimed)
			last = ik[:timeKeyLen]
			continue
		}
		rec, err := s.codec.decode(k, v)
		if err != nil {
			if err := skipDamaged(err); err != nil {
				return nil, err // nothing written yet
			}
			continue
		}
		if rec.State != keystore.StatePending || !timeOfKey(ik).Equal(storedInstant(rec.CreatedAt)) {
			stale = append(stale, bytes.Clone(ik))
			continue
		}
		if keystore.Orphaned(rec, l.Now) {
			orphans = append(orphans, rec)
			last = ik[:timeKeyLen]
		}
	}
	// The index orders CreatedAt ties by the records key (scope length first), not by Key
	// then Scope: sort even within limit.
	keystore.SortRecords(orphans)
	if len(orphans) > limit {
		orphans = orphans[:limit]
	}
	for _, ik := range stale {
		if err := unleased.Delete(ik); err != nil {
			return nil, abort(err)
		}
	}
	for _, rec := range orphans {
		k := scopedKey(rec.Scope, rec.Key)
		p := taken[rec]
		if p == nil {
			old := indexFields(rec)
			keystore.ApplyClaim(rec, l)
			v, err := s.codec.value(k, rec)
			if err != nil {
				return nil, abort(err)
			}
			p = &preparedClaim{before: old, claimed: rec, value: v}
		}
		if err := s.putValue(tx, k, p.value, p.before, rec); err != nil {
			return nil, err
		}
		// The claimed record's next write is its call's final one: the summary cache keeps
		// the new value's summary, so that this update need not decode it in its commit.
		s.summaries.put(&encoded{rec: rec, key: k, value: p.value, codec: &s.codec})
	}
	return orphans, nil
}

// putRecord writes rec, a record decoded from the file (so valid, its secrets already
// stripped), under k, where old (indexFields) was, and moves its index entry. A failure aborts
// the transaction.
func (s *Store) putRecord(tx *bbolt.Tx, k []byte, old, rec *keystore.Record) error {
	v, err := s.codec.value(k, rec)
	if err != nil {
		return abort(err)
	}
	if err := s.putValue(tx, k, v, old, rec); err != nil {
		return err
	}
	s.summaries.drop(k) // its value is replaced: the next update decodes this one
	return nil
}

// putValue writes v, the encoding of rec, under k, where old (indexFields) was, and moves
// its index entry; the caller sees to the summary cache. A failure aborts the transaction.
func (s *Store) putValue(tx *bbolt.Tx, k, v []byte, old, rec *keystore.Record) error {
	if err := tx.Bucket(bucketRecords).Put(k, v); err != nil {
		return abort(err)
	}
	return reindex(tx, k, old, rec)
}

// keepLease makes e, a record about to replace old in Update, carry old's lease fields:
// Update never changes a lease. The value is encoded again only when they differ.
func keepLease(e *encoded, old *keystore.Record) error {
	if keystore.SameLease(e.rec, old) {
		return nil
	}
	full, err := e.full()
	if err != nil {
		return err
	}
	rec := *full
	keystore.KeepLease(&rec, old)
	v, err := e.codec.value(e.key, &rec)
	if err != nil {
		return err
	}
	e.value = v
	e.setFields(&rec)
	return nil
}

// indexFields copies the fields of rec that place its index entry (reindex), before a
// change to rec.
func indexFields(rec *keystore.Record) *keystore.Record {
	return &keystore.Record{State: rec.State, CreatedAt: rec.CreatedAt, Owner: rec.Owner, LeaseUntil: rec.LeaseUntil}
}
