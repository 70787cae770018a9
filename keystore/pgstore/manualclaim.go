package pgstore

import (
	"context"
	"errors"

	"github.com/idemkit/idem/keystore"
)

// ClaimManual gives l.Owner the lease of the manual record (scope, key) until l.Until, with
// the next fencing token, and returns the claimed record (keystore.ManualClaimer): a cancel
// by reference is in flight. One statement claims it; a second reads the record only to say
// why not. Errors: keystore.ErrInvalid (bad lease), keystore.ErrNotFound,
// keystore.ErrStateChanged (wrapped: the record is not manual), *keystore.ClaimedError,
// keystore.ErrClosed, or the database's error.
func (s *Store) ClaimManual(ctx context.Context, scope, key string, l keystore.Lease) (*keystore.Record, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	now, until, err := leaseNanos(l)
	if err != nil {
		return nil, err
	}
	rec, err := s.getOne(ctx, `UPDATE idem_records SET owner = $3, lease_until_ns = $5, fence = fence + 1
		WHERE tenant = $1 AND key = $2 AND state = 'manual'
		AND (owner IS NULL OR lease_until_ns IS NULL OR lease_until_ns <= $4 OR owner = $3)
		RETURNING `+columns, []byte(scope), []byte(key), l.Owner, now, until)
	if !errors.Is(err, keystore.ErrNotFound) {
		return rec, err
	}
	cur, err := s.getOne(ctx, `SELECT `+columns+` FROM idem_records WHERE tenant = $1 AND key = $2`, []byte(scope), []byte(key))
	if err != nil {
		return nil, err
	}
	if err := keystore.ManualClaimRefusal(cur, l); err != nil {
		return nil, err
	}
	// Claimable now: the lease ended between the two statements. Report the one we lost to;
	// the caller asks again later, as for any ClaimedError.
	return nil, &keystore.ClaimedError{Scope: scope, Key: key, Owner: cur.Owner, Until: cur.LeaseUntil, Fence: cur.Fence}
}
