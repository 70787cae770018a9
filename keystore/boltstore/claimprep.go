package boltstore

import (
	"bytes"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
)

// A claim of ClaimExpired decodes the record (about 7 µs) and encodes it again with its new
// lease (about 12 µs). Done inside the commit, a batch of 128 claims held every writer queued
// behind it (a Do's Create) for 2-3 ms of CPU before bbolt even wrote a page. So ClaimExpired
// prepares its claims first, in a read transaction on the caller's goroutine (which the
// other core runs while the committer commits other writes): it decodes the oldest
// candidates and encodes each one claimed. The commit then decides exactly as before,
// taking a prepared claim only when the stored value is byte for byte the one it was
// prepared from, so the record it claims, its new Fence and the value it writes are those
// the commit would have computed itself; a record written since (a call's final write,
// another claim) or not prepared is decoded and encoded in the commit as before.

// maxPreparedValue is the largest stored value (bytes) whose claim is prepared: a record
// with a large body is claimed in the commit as before, so that a batch's preparation holds
// at most 2 × 128 small values and their claimed copies in memory.
const maxPreparedValue = 16 << 10

// preparedClaim is the claim of one record, made from the value old.
type preparedClaim struct {
	old     []byte           // the records bucket value it was made from (a copy)
	before  *keystore.Record // indexFields of the record before the claim
	claimed *keystore.Record // the record with the lease applied
	value   []byte           // its encoding, to be stored under the same key
}

// prepareClaims prepares the claims of up to n orphans at l.Now among the oldest entries of
// "unleased" and up to n among the expired entries of "leased" (which the commit moves to
// "unleased" first), keyed by records key. It is only a cache: any error, a damaged record or
// a closed store leaves entries out, and the commit decides without them.
func (s *Store) prepareClaims(l keystore.Lease, n int) map[string]*preparedClaim {
	out := make(map[string]*preparedClaim, 2*n)
	_ = s.view(func(tx *bbolt.Tx) error {
		records := tx.Bucket(bucketRecords)
		prepare := func(ik []byte) bool {
			k := ik[timeKeyLen:]
			v := records.Get(k)
			if v == nil || len(v) > maxPreparedValue || out[string(k)] != nil {
				return false
			}
			rec, err := s.codec.decode(k, v)
			if err != nil || !keystore.Orphaned(rec, l.Now) || !timeOfKey(ik).Equal(storedInstant(rec.CreatedAt)) {
				return false
			}
			before := indexFields(rec)
			keystore.ApplyClaim(rec, l)
			nv, err := s.codec.value(k, rec)
			if err != nil {
				return false
			}
			out[string(k)] = &preparedClaim{old: bytes.Clone(v), before: before, claimed: rec, value: nv}
			return true
		}
		if b := tx.Bucket(bucketUnleased); b != nil {
			c, got := b.Cursor(), 0
			for ik, _ := c.First(); ik != nil && got < n; ik, _ = c.Next() {
				if len(ik) > timeKeyLen && prepare(ik) {
					got++
				}
			}
		}
		if b := tx.Bucket(bucketLeased); b != nil {
			c, got := b.Cursor(), 0
			for k, _ := c.First(); k != nil && got < n; k, _ = c.Next() {
				if len(k) <= 2*timeKeyLen || timeOfKey(k).After(l.Now) {
					break
				}
				if prepare(k[timeKeyLen:]) {
					got++
				}
			}
		}
		return nil
	})
	return out
}
