package boltstore

import (
	"context"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
)

// ClaimManual gives l.Owner the lease of the manual record (scope, key) with the next fencing
// token, once durable, and returns the claimed record (keystore.ManualClaimer): a cancel by
// reference is in flight. Errors: keystore.ErrInvalid (bad lease), keystore.ErrNotFound,
// keystore.ErrStateChanged (wrapped: the record is not manual), *keystore.ClaimedError,
// ErrCorrupt, keystore.ErrClosed, ctx.Err(), or the commit's I/O error.
func (s *Store) ClaimManual(ctx context.Context, scope, key string, l keystore.Lease) (*keystore.Record, error) {
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
		if err := keystore.ManualClaimRefusal(rec, l); err != nil {
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
