package idem

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/profile"
)

// A cancel by reference (profile.CancelByReference) voids every charge under the order's
// reference, so it must not overlap another verdict on the record: a webhook's "executed"
// given while the cancel is on its way reports a payment the cancel then voids, and a second
// instance's cancel that lands after the first one's "not executed" voids the order's next
// payment. Before it sends a cancel, an instance claims the manual record in the shared store
// (keystore.ManualClaimer) for as long as the cancel can take; every other verdict waits
// until that claim has ended and the cancel's Route.Landing has passed since (Resolve:
// ErrCancelInFlight), and so does the next cancel. A verdict formed from the record before
// the claim carries the old Fence and is refused by the store.
//
// A manual record also keeps the lease of the call that sent last (written manual under
// it), which says nothing about a cancel: a cancel's claim is told apart by its Owner, the
// instance's Owner with cancelOwnerSuffix.
const cancelOwnerSuffix = "/cancel"

// cancelOwner is the Owner of this client's claims for a cancel.
func (c *Client) cancelOwner() string { return c.cfg.Fleet.Owner + cancelOwnerSuffix }

// cancelClaimed reports whether rec carries a cancel's claim, live or ended.
func cancelClaimed(rec *keystore.Record) bool {
	return strings.HasSuffix(rec.Owner, cancelOwnerSuffix) && !rec.LeaseUntil.IsZero()
}

// cancelLanding is how long after a cancel's claim has ended its request may still land: the
// profile's Route.Landing, or profile.DefaultLanding for a client that does not cancel
// itself (an operator's, a webhook tier's) but sees another instance's claim.
func (c *Client) cancelLanding() time.Duration {
	if c.dialect.actLanding > 0 {
		return c.dialect.actLanding
	}
	return profile.DefaultLanding
}

// cancelMayLand returns an error wrapping ErrCancelInFlight while a cancel claimed on rec
// (the stored record) may still land, and nil otherwise. A verdict of "executed" is refused
// for good once a cancel was sent: the cancel may have voided the charge (it landed but its
// answer was lost, or its claimant died after it), and only a cancel's own verdict, "not
// executed", settles such a record, or the provider's refusal of the cancel
// (Resolution.CancelRefused).
func (c *Client) cancelMayLand(rec *keystore.Record, r Resolution) error {
	if !cancelClaimed(rec) {
		return nil
	}
	if r.Verdict == VerdictExecuted && r.CancelRefused {
		return nil // the provider refused the cancel: nothing of it can land
	}
	if r.Verdict == VerdictExecuted {
		return fmt.Errorf("%w: a cancel by reference was sent for the record by %s, and may have voided its charge: only the cancel's verdict (not executed) settles it", ErrCancelInFlight,
			strings.TrimSuffix(rec.Owner, cancelOwnerSuffix))
	}
	if ready := rec.LeaseUntil.Add(c.cancelLanding()); c.cfg.Now().Before(ready) {
		return fmt.Errorf("%w: claimed by %s until %s, and it may land until %s", ErrCancelInFlight,
			strings.TrimSuffix(rec.Owner, cancelOwnerSuffix), rec.LeaseUntil.UTC().Format(time.RFC3339), ready.UTC().Format(time.RFC3339))
	}
	return nil
}

// claimForCancel claims the manual record rec for this client's cancel, for as long as the
// cancel's request can take (the attempt timeout, and a second for reading its answer), and
// returns the claimed record: a verdict written after the cancel carries its Fence. An error
// (another instance's claim, a verdict given meanwhile, a store error) means no cancel is
// sent now.
//
// The claim also covers the cancel's landing, so that a client configured with a shorter
// Route.Landing (an operator's) still waits for this one; readers add their own landing on
// top. The clock is checked against the store's first: a clock behind would write a claim
// that other instances already see as ended. The claim must follow the record as seen
// (rec.Fence + 1): another claim in between (this call paused past it) may be a cancel
// whose landing rec's check did not wait for.
func (c *Client) claimForCancel(ctx context.Context, rec *keystore.Record) (*keystore.Record, error) {
	if err := c.checkWriteClock(ctx, rec); err != nil {
		return nil, err
	}
	now := c.cfg.Now()
	l := keystore.Lease{Owner: c.cancelOwner(), Now: now, Until: now.Add(c.policy.AttemptTimeout + time.Second + c.cancelLanding())}
	claimed, err := keystore.ClaimManual(context.WithoutCancel(ctx), c.store, rec.Scope, rec.Key, l)
	if err != nil {
		return nil, fmt.Errorf("claiming the record for a cancel by reference: %w", err)
	}
	if claimed.Fence != rec.Fence+1 {
		return nil, fmt.Errorf("claiming the record for a cancel by reference: claimed at fence %d, but it was at %d when read: claimed by another instance since; asked again later", claimed.Fence, rec.Fence)
	}
	return claimed, nil
}

// cancelRequested marks rec, which this client claimed and whose cancel the provider
// accepted without its outcome (profile.Route.Async), as waiting for the provider's event:
// still manual, reasonCancelRequested, so that no second cancel follows. It writes under the
// claim's Fence; a failed write leaves the record as it was (a later cancel is then sent
// after the landing, which is harmless).
func (c *Client) cancelRequested(ctx context.Context, rec *keystore.Record, note string) error {
	next := rec.Clone()
	next.Reason = reasonCancelRequested
	next.Note = note + "; waiting for the provider's event on the cancel (webhook.Settle) or a person (Resolve)"
	touch(next, c.cfg.Now())
	var err error
	if g, ok := c.store.(keystore.StateGuardedUpdater); ok {
		err = g.UpdateFromState(context.WithoutCancel(ctx), next, keystore.StateManual)
	} else {
		err = c.store.Update(context.WithoutCancel(ctx), next)
	}
	if err != nil {
		return err
	}
	*rec = *next
	return nil
}
