package boltstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
)

// The pending index (schema version 2) lets ClaimExpired find the oldest orphans without
// reading every record: a scan and sort of the whole records bucket per batch made a Recover
// of N records whose leases had expired cost O(N²), inside the commit every writer shares.
//
// Every pending record has one entry, in one of two buckets:
//   - "unleased", keyed timeKey(CreatedAt) || records key: the pending records without a
//     lease (never claimed, released, an Owner without LeaseUntil), and leased ones that
//     ClaimExpired moved here once their lease had expired by its clock;
//   - "leased", keyed timeKey(LeaseUntil) || timeKey(CreatedAt) || records key: the other
//     pending records with an Owner and a LeaseUntil, soonest expiry first.
//
// ClaimExpired first moves the entries of "leased" that expired by its clock to "unleased"
// (each entry moves once per expiry, at most maxExpiryMoves per commit, so that a backlog of a
// million expired leases is moved in many short commits instead of one long one), then reads
// "unleased" in CreatedAt order, decoding only the records it claims (and the few it finds no
// longer orphaned at its clock, left where they are). Records that are not pending have no
// entry. Values are empty: the keys say everything.
var (
	bucketUnleased = []byte("unleased")
	bucketLeased   = []byte("leased")
)

// maxExpiryMoves bounds the index entries one commit moves from "leased" to "unleased":
// about 2 µs each, so a commit holds the writers waiting behind it a few milliseconds at most.
const maxExpiryMoves = 1024

// timeKeyLen is the length of timeKey's encoding.
const timeKeyLen = 12

// appendTimeKey appends an encoding of the instant t as the file stores it (storedInstant)
// whose byte order is time order: Unix seconds with the sign bit flipped, then nanoseconds,
// big-endian. Every time.Time has one, the zero time included.
func appendTimeKey(b []byte, t time.Time) []byte {
	t = storedInstant(t)
	b = binary.BigEndian.AppendUint64(b, uint64(t.Unix())^(1<<63))
	return binary.BigEndian.AppendUint32(b, uint32(t.Nanosecond()))
}

// timeOfKey is the inverse of appendTimeKey (b holds at least timeKeyLen bytes).
func timeOfKey(b []byte) time.Time {
	sec := int64(binary.BigEndian.Uint64(b) ^ (1 << 63))
	return time.Unix(sec, int64(binary.BigEndian.Uint32(b[8:])))
}

// storedInstant is the instant t reads back as from a record's JSON. RFC 3339 writes a zone
// offset in hours and minutes only, so a time in a zone offset by some seconds (a caller's
// FixedZone, local mean time before 1900) is stored a few seconds off; the index keys it as
// stored, so that the key computed from the record in memory at a write and the key computed
// from the decoded record at the next write are the same.
func storedInstant(t time.Time) time.Time {
	if _, off := t.Zone(); off%60 == 0 {
		return t
	}
	b, err := t.MarshalJSON()
	if err != nil {
		return t
	}
	var out time.Time
	if err := out.UnmarshalJSON(b); err != nil {
		return t
	}
	return out
}

// leasedEntry reports whether the pending record rec belongs in "leased".
func leasedEntry(rec *keystore.Record) bool {
	return rec.Owner != "" && !rec.LeaseUntil.IsZero()
}

// unleasedKey is the "unleased" key of the record rec stored under k.
func unleasedKey(k []byte, rec *keystore.Record) []byte {
	b := make([]byte, 0, timeKeyLen+len(k))
	return append(appendTimeKey(b, rec.CreatedAt), k...)
}

// leasedKey is the "leased" key of the record rec stored under k.
func leasedKey(k []byte, rec *keystore.Record) []byte {
	b := make([]byte, 0, 2*timeKeyLen+len(k))
	b = appendTimeKey(b, rec.LeaseUntil)
	return append(appendTimeKey(b, rec.CreatedAt), k...)
}

// reindex moves the index entry of the record stored under k from where old (nil: no record)
// puts it to where rec (nil: deleted) does, inside a write transaction. Nothing is written
// when both put it in the same place: an update that changes neither the state nor the lease
// (most do) costs the index nothing. A failure is an abort (the transaction rolls back).
func reindex(tx *bbolt.Tx, k []byte, old, rec *keystore.Record) error {
	return reindexWith(tx, nil, k, old, rec)
}

// reindexWith is reindex deleting through the commit's cursors (txCursors; nil: none).
func reindexWith(tx *bbolt.Tx, cur *txCursors, k []byte, old, rec *keystore.Record) error {
	oldPending := old != nil && old.State == keystore.StatePending
	newPending := rec != nil && rec.State == keystore.StatePending
	if oldPending && newPending && leasedEntry(old) == leasedEntry(rec) &&
		storedInstant(old.CreatedAt).Equal(storedInstant(rec.CreatedAt)) &&
		(!leasedEntry(rec) || storedInstant(old.LeaseUntil).Equal(storedInstant(rec.LeaseUntil))) {
		return nil
	}
	unleased, leased := tx.Bucket(bucketUnleased), tx.Bucket(bucketLeased)
	if oldPending {
		// A leased entry may have been moved to "unleased" once its lease expired: delete both.
		// The keys are built on the stack (a lookup keeps no key): most record keys fit.
		var buf [2*timeKeyLen + 64]byte
		if err := cur.del(tx, cursorUnleased, append(appendTimeKey(buf[:0], old.CreatedAt), k...)); err != nil {
			return abort(err)
		}
		if leasedEntry(old) {
			if err := cur.del(tx, cursorLeased, append(appendTimeKey(appendTimeKey(buf[:0], old.LeaseUntil), old.CreatedAt), k...)); err != nil {
				return abort(err)
			}
		}
	}
	if !newPending {
		return nil
	}
	var err error
	if leasedEntry(rec) {
		err = leased.Put(leasedKey(k, rec), nil)
	} else {
		err = unleased.Put(unleasedKey(k, rec), nil)
	}
	if err != nil {
		return abort(err)
	}
	return nil
}

// expireLeases moves to "unleased" up to max entries of "leased" whose lease is not live at
// now, soonest expiry first, and returns how many it moved. Keys out of order or too short to
// be index keys are structural damage (ErrCorrupt).
func expireLeases(tx *bbolt.Tx, now time.Time, max int) (int, error) {
	leased, unleased := tx.Bucket(bucketLeased), tx.Bucket(bucketUnleased)
	var keys [][]byte
	var prev []byte
	c := leased.Cursor()
	for k, _ := c.First(); k != nil && len(keys) < max; k, _ = c.Next() {
		if err := checkIndexKey("leased", k, prev, 2*timeKeyLen); err != nil {
			return 0, err
		}
		prev = k
		if timeOfKey(k).After(now) {
			break
		}
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := leased.Delete(k); err != nil {
			return 0, abort(err)
		}
		if err := unleased.Put(k[timeKeyLen:], nil); err != nil {
			return 0, abort(err)
		}
	}
	return len(keys), nil
}

// checkIndexKey returns a structural ErrCorrupt if k, read from the index bucket name after
// prev, is not after prev or shorter than min plus the shortest records key.
func checkIndexKey(name string, k, prev []byte, min int) error {
	if len(k) <= min || len(k) > bbolt.MaxKeySize {
		return structural(fmt.Errorf("%w: %s index key of %d bytes", ErrCorrupt, name, len(k)))
	}
	if prev != nil && bytes.Compare(k, prev) <= 0 {
		return structural(fmt.Errorf("%w: %s index key %q follows %q: the index is out of order", ErrCorrupt, name, clip(k), clip(prev)))
	}
	return nil
}

// buildIndex creates the index buckets and fills them from the records bucket: the upgrade of
// a schema version 1 file, done by Open in one transaction. A record that does not decode gets
// no entry (ClaimExpired skipped it before as well; ListPage reports it).
func buildIndex(tx *bbolt.Tx) error {
	if _, err := tx.CreateBucketIfNotExists(bucketUnleased); err != nil {
		return err
	}
	if _, err := tx.CreateBucketIfNotExists(bucketLeased); err != nil {
		return err
	}
	return forEachRecord(tx.Bucket(bucketRecords), func(k, v []byte) error {
		if v == nil {
			return nil
		}
		rec, err := decodeSummary(k, v)
		if err != nil {
			return skipDamaged(err)
		}
		return reindex(tx, k, nil, rec)
	})
}
