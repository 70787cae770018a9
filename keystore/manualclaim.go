package keystore

import (
	"context"
	"errors"
)

// ManualClaimer is implemented by a store that can lease a manual record to one instance
// while that instance acts on the provider to settle it: a cancel by reference
// (profile.CancelByReference, Adyen's cancel by merchant reference). Such an action voids
// every charge under the order's reference, so it must not overlap another verdict: one
// given meanwhile elsewhere (a webhook's "executed", which the cancel then voids) or one that
// lets the application pay the order again (a second instance's cancel, landing after that
// new payment, would void it). The lease is that reservation, kept in the store that every
// instance shares, with the same fencing as a pending record's: a verdict formed from the
// record before the claim carries the old Fence and is refused (ErrFenced).
//
// Memory, the bbolt file store and pgstore implement it. A client whose profile cancels by
// reference refuses a store without it (idem.ErrInvalidConfig).
type ManualClaimer interface {
	// ClaimManual gives l.Owner the lease of the manual record (scope, key) until l.Until,
	// with the next Fence, and returns the claimed record; the record stays manual and its
	// contents (UpdatedAt included) are unchanged. The holder itself may claim again (new
	// Fence). Errors: ErrInvalid if l fails Validate, ErrNotFound if absent, an error
	// wrapping ErrStateChanged naming the stored state if the record is not manual (a verdict
	// was given, or it is still pending), a *ClaimedError (errors.Is ErrClaimed) if another
	// owner holds a lease live at l.Now; ErrClosed, ctx.Err(). Nothing changes on an error.
	ClaimManual(ctx context.Context, scope, key string, l Lease) (*Record, error)
}

// ManualClaimRefusal returns why ClaimManual by l may not take rec: an error wrapping
// ErrStateChanged, or a *ClaimedError; nil if it may. Backends call it under their lock.
func ManualClaimRefusal(rec *Record, l Lease) error {
	if rec.State != StateManual {
		return StateChanged(rec.State, StateManual)
	}
	if rec.Live(l.Now) && rec.Owner != l.Owner {
		return &ClaimedError{Scope: rec.Scope, Key: rec.Key, Owner: rec.Owner, Until: rec.LeaseUntil, Fence: rec.Fence}
	}
	return nil
}

var errNoManualClaim = errors.New("keystore: the store cannot claim a manual record (keystore.ManualClaimer)")

// ClaimManual claims the manual record (scope, key) through s's ManualClaimer; a store
// without one gets an error wrapping ErrInvalid.
func ClaimManual(ctx context.Context, s Store, scope, key string, l Lease) (*Record, error) {
	mc, ok := s.(ManualClaimer)
	if !ok {
		return nil, errors.Join(ErrInvalid, errNoManualClaim)
	}
	return mc.ClaimManual(ctx, scope, key, l)
}
