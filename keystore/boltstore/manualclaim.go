package boltstore

import (
	"context"

	"github.com/idemkit/idem/keystore"
)

// ClaimManual gives l.Owner the lease of the manual record (scope, key) with the next fencing
// token, once durable, and returns the claimed record (keystore.ManualClaimer): a cancel by
// reference is in flight. Errors: keystore.ErrInvalid (bad lease), keystore.ErrNotFound,
// keystore.ErrStateChanged (wrapped: the record is not manual), *keystore.ClaimedError,
// ErrCorrupt, keystore.ErrClosed, ctx.Err(), or the commit's I/O error.
func (s *Store) ClaimManual(ctx context.Context, scope, key string, l keystore.Lease) (*keystore.Record, error) {
	return s.claimOne(ctx, scope, key, l, keystore.ManualClaimRefusal)
}
