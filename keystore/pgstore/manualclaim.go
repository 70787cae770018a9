package pgstore

import (
	"context"

	"github.com/idemkit/idem/keystore"
)

// ClaimManual gives l.Owner the lease of the manual record (scope, key) until l.Until, with
// the next fencing token, and returns the claimed record (keystore.ManualClaimer): a cancel
// by reference is in flight. Errors: keystore.ErrInvalid (bad lease), keystore.ErrNotFound,
// keystore.ErrStateChanged (wrapped: the record is not manual), *keystore.ClaimedError,
// keystore.ErrClosed, or the database's error.
func (s *Store) ClaimManual(ctx context.Context, scope, key string, l keystore.Lease) (*keystore.Record, error) {
	return s.claimOne(ctx, scope, key, l, keystore.StateManual, keystore.ManualClaimRefusal)
}
