package idem

import (
	"context"
	"errors"
	"fmt"

	"github.com/cenkalti/backoff/v4"

	"github.com/idemkit/idem/keystore"
)

// acquire claims a pending record that Do found in the store (another call, instance or
// process created it). While another instance holds a live lease it waits, reading the
// record with the policy's backoff (Config.Sleep, Config.Now) and bounded only by ctx, until
// the record is final, which it returns as stored, or the lease has expired (the owner died)
// or been released, when it claims the record and returns it claimed. The in-process key
// lock is held throughout, so no other call of this client interleaves.
func (c *Client) acquire(ctx context.Context, s callSettings, rec *keystore.Record) (*keystore.Record, error) {
	p := s.policy
	bo := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(p.InitialDelay),
		backoff.WithMultiplier(p.Multiplier),
		backoff.WithRandomizationFactor(p.Jitter),
		backoff.WithMaxInterval(p.MaxDelay),
		backoff.WithMaxElapsedTime(0),
	)
	waited := false
	for {
		if rec.State != keystore.StatePending {
			return rec, nil
		}
		now := c.cfg.Now()
		if !rec.Live(now) || rec.Owner == c.cfg.Fleet.Owner || c.deadOwner(rec) {
			if c.takesOver(rec) { // judged by our clock only: check it against the store's
				if err := c.checkClock(ctx, opTakeover, rec); err != nil {
					return nil, c.takeoverRefused(ctx, rec, err)
				}
			}
			claimed, err := c.store.Claim(ctx, rec.Scope, rec.Key, c.leaseFor(rec))
			switch {
			case err == nil:
				if rec.Owner != "" && rec.Owner != c.cfg.Fleet.Owner { // its owner died (or stalled)
					c.stats.orphans.Add(1)
				}
				return claimed, nil
			case errors.Is(err, keystore.ErrNotPending):
				// Finished between our read and the claim: read it again below.
			case errors.Is(err, keystore.ErrClaimed):
				// Another instance was quicker: wait for it like for any owner.
			default:
				return nil, c.leaseWaitError(rec, fmt.Errorf("idem: claiming the record: %w", err), false)
			}
		}
		if !waited {
			waited = true
			c.stats.leaseWaits.Add(1)
			if l := c.cfg.Logger; l != nil {
				l.Debug("idem record claimed by another instance; waiting", "key", rec.Key, "owner", rec.Owner,
					"lease_until", rec.LeaseUntil)
			}
		}
		d := bo.NextBackOff()
		if d < 0 || d > p.MaxDelay {
			d = p.MaxDelay
		}
		if left := rec.LeaseUntil.Sub(now); rec.Live(now) && left > 0 && left < d {
			d = left // look again as soon as the lease may have expired
		}
		if err := c.cfg.Sleep(ctx, d); err != nil {
			return nil, c.leaseWaitError(rec, err, true)
		}
		fresh, err := c.get(ctx, rec.Scope, rec.Key)
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return nil, c.leaseWaitError(rec, cerr, true)
			}
			return nil, c.leaseWaitError(rec, fmt.Errorf("idem: reading keystore: %w", err), false)
		}
		rec = fresh
	}
}

// leaseWaitError is what Do returns when it stops before it could claim a record another
// instance is sending: ErrCanceled when ctx ended (outcome unknown: the other instance may
// have sent it), the store's error otherwise.
func (c *Client) leaseWaitError(rec *keystore.Record, err error, canceled bool) error {
	if !canceled {
		return err
	}
	return &OperationError{Key: rec.Key, Scope: rec.Scope, Intent: rec.Intent, Kind: ErrCanceled,
		Unknown: true, LastStatusCode: rec.LastStatusCode, Cause: err}
}

// takeoverRefused is what Do returns when it did not take over rec because the clock check
// failed: an *OperationError matching ErrClockSkew (outcome unknown: the other instance may
// have sent it), or ErrCanceled, or the store's error. Nothing was sent or written.
func (c *Client) takeoverRefused(ctx context.Context, rec *keystore.Record, err error) error {
	if errors.Is(err, ErrClockSkew) {
		return &OperationError{Key: rec.Key, Scope: rec.Scope, Intent: rec.Intent, Kind: ErrClockSkew,
			Unknown: true, LastStatusCode: rec.LastStatusCode, Cause: err}
	}
	if cerr := ctx.Err(); cerr != nil {
		return c.leaseWaitError(rec, cerr, true)
	}
	return c.leaseWaitError(rec, err, false)
}
