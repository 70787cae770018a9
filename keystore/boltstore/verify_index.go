package boltstore

import (
	"bytes"
	"fmt"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
)

// verifyPendingIndex checks the pending index ("unleased", "leased"; index.go) against the
// records, so that a changed byte in an index entry is damage that Verify reports, like one in
// a record or an intent entry: every entry must name a pending record and carry its CreatedAt
// (and, in "leased", its lease expiry), and every pending record must have exactly one entry.
// pending maps each sound pending record's key to it; entries naming a record that does not
// decode are left to the records' own problem.
func verifyPendingIndex(tx *bbolt.Tx, pending map[string]*keystore.Record, problem func(bucket, scope, key, intent string, err error)) {
	records := tx.Bucket(bucketRecords)
	seen := make(map[string]int, len(pending))
	check := func(bucket string, prefix int, want func(k []byte, rec *keystore.Record) []byte) {
		_ = tx.Bucket([]byte(bucket)).ForEach(func(ik, _ []byte) error {
			if len(ik) <= prefix {
				problem(bucket, "", "", "", fmt.Errorf("%w: %s index key of %d bytes", ErrCorrupt, bucket, len(ik)))
				return nil
			}
			k := ik[prefix:]
			rec, ok := pending[string(k)]
			if !ok {
				if records.Get(k) != nil {
					if _, err := decodeSummary(k, records.Get(k)); err != nil {
						return nil // a damaged record: reported as such
					}
				}
				scope, key, _ := splitScopedKey(k)
				problem(bucket, scope, key, "", fmt.Errorf("%w: %s index entry %q names no pending record", ErrCorrupt, bucket, clip(ik)))
				return nil
			}
			if !bytes.Equal(ik, want(k, rec)) {
				problem(bucket, rec.Scope, rec.Key, "", fmt.Errorf("%w: %s index entry %q does not match its record's times", ErrCorrupt, bucket, clip(ik)))
				return nil
			}
			seen[string(k)]++
			return nil
		})
	}
	check(string(bucketUnleased), timeKeyLen, unleasedKey)
	check(string(bucketLeased), 2*timeKeyLen, leasedKey)
	for k, rec := range pending {
		if n := seen[k]; n != 1 {
			problem("unleased", rec.Scope, rec.Key, "", fmt.Errorf("%w: pending record (%q, %q) has %d entries in the pending index, want 1", ErrCorrupt, rec.Scope, rec.Key, n))
		}
	}
}

// dropPendingEntries deletes the pending index entries that name the records key k, found by
// a scan (Quarantine: the damaged record's times cannot be read).
func dropPendingEntries(tx *bbolt.Tx, k []byte) error {
	for _, b := range []struct {
		name   []byte
		prefix int
	}{{bucketUnleased, timeKeyLen}, {bucketLeased, 2 * timeKeyLen}} {
		bucket := tx.Bucket(b.name)
		var drop [][]byte
		_ = bucket.ForEach(func(ik, _ []byte) error {
			if len(ik) > b.prefix && bytes.Equal(ik[b.prefix:], k) {
				drop = append(drop, bytes.Clone(ik))
			}
			return nil
		})
		for _, ik := range drop {
			if err := bucket.Delete(ik); err != nil {
				return abort(err)
			}
		}
	}
	return nil
}
