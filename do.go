package idem

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem/keystore"
)

// Do: one operation, from its record to its final answer.

// Do sends op until it reaches a known state, retrying within the policy (client defaults,
// then opts). The record is persisted before the first byte is sent.
//
// It returns the successful Result, or an *OperationError matching ErrPermanent,
// ErrKeyConflict, ErrOutcomeUnknown, ErrStoredServerError (with ErrOutcomeUnknown),
// ErrExhausted, ErrRetryAfterTooLong, ErrDeadline, ErrBudgetExhausted, ErrKeyExpired,
// ErrNotExecuted, ErrLeaseLost, ErrClockSkew or ErrCanceled. Invalid input gives
// ErrInvalidOperation (also a nil ctx), ErrInvalidPolicy or ErrInvalidConfig (also a nil or
// zero *Client); a keystore failure before the first send is the store's error wrapped
// (nothing sent; retry the call).
//
// What the errors mean for the payment: only ErrPermanent is a failure of the payment, and
// ErrNotExecuted the one answer after which the application may pay again under a new
// intent. ErrKeyConflict refuses this request without saying what became of the one that
// holds the key or intent (it may have been charged): fix the request, never pay again
// because of it. After ErrStoredServerError and ErrKeyExpired the record is manual (never
// resent; Config.Lookup or Client.Resolve settles it); after the others it stays pending, and
// a later Do of the same operation or Recover finishes it.
//
// A Create that reported an error may have committed, or may still: Do then marks that record
// failed, not executed ("withdrawn"), or takes its key with such a tombstone, so that no
// Recover sends it later. A later Do of the same intent sends the withdrawn record, under its
// key (the intent binds it: retrying the call is safe); one without an intent stays failed and
// a later Do of it returns ErrNotExecuted (its caller may have paid again under a new key
// meanwhile). When Do cannot settle the key (the store still failing, another instance holding
// the record), the error names the key and says so, and the caller should continue with the
// same operation (or intent) rather than a new key.
//
// A second Do of the same key (or intent) waits for the first and returns its outcome, never
// sending concurrently. Across the instances of a fleet sharing the Store the same holds
// through the record's lease (Config.Fleet.LeaseTTL): a Do that finds the record claimed by
// another instance waits, bounded by ctx (ErrCanceled, outcome unknown), until the record is
// final (its stored outcome is returned) or the lease expired (the owner died: Do claims the
// record and continues the same key, status endpoint first). Two clock checks guard that
// takeover: a record created later than this clock's now by more than twice MaxClockSkew (a
// clock stepped back) is past KeyTTL as far as Do can tell, so ErrKeyExpired, never resent;
// and when the store has a clock and this client's differs from it by more than
// Config.Fleet.MaxClockSkew, Do does not take over another instance's record and returns
// ErrClockSkew, outcome unknown, without sending or writing. A call whose record another
// instance took over stops at once and returns ErrLeaseLost, without sending again or writing.
func (c *Client) Do(ctx context.Context, op *Operation, opts ...CallOption) (*Result, error) {
	if err := checkEntry(c, ctx); err != nil {
		return nil, err
	}
	c.enter()
	defer c.exit()
	u, err := op.check()
	if err != nil {
		return nil, err
	}
	op, err = c.adoptKeyHeader(op)
	if err != nil {
		return nil, err
	}
	if err := c.checkKeyFor(op.key, op.body); err != nil {
		return nil, err
	}
	c.maybePurge()
	s, err := c.settings(opts)
	if err != nil {
		return nil, err
	}
	target, err := c.resolveParsed(op.url, u)
	if err != nil {
		return nil, err
	}
	scope := c.cfg.Tenant
	if op.hasTen {
		scope = op.tenant
	}
	if err := ctx.Err(); err != nil {
		return nil, &OperationError{Key: op.key, Scope: scope, Intent: op.intent, Kind: ErrCanceled, Cause: err}
	}
	if op.intent != "" {
		unlock, waited, err := c.locks.lock(ctx, intentLockName(scope, op.intent))
		if err != nil {
			return nil, &OperationError{Key: op.key, Scope: scope, Intent: op.intent, Kind: ErrCanceled, Cause: err}
		}
		defer unlock.Unlock()
		if waited {
			c.stats.sameKey.Add(1)
		}
	}
	// The key lock is taken before the record is read or created, so that no other call or
	// Recover in this process can send the key between our Create and our first attempt.
	key := op.key
	if op.intent != "" {
		if rec, err := c.getByIntent(ctx, scope, op.intent); err == nil {
			if op.keyBound && rec.Key != op.key { // checked under the intent lock: no race
				return nil, &OperationError{Key: op.key, Scope: scope, Intent: op.intent, Kind: ErrKeyConflict,
					Cause: fmt.Errorf("intent %q is bound to key %q, the request's %s header says %q", op.intent, rec.Key, c.cfg.KeyHeader, op.key)}
			}
			key = rec.Key
		}
	}
	var held heldLock // unlocked when Do returns; one defer outside the loop costs no allocation
	defer func() {
		if held.k != nil {
			held.Unlock()
		}
	}()
	cl := new(call) // holds the record open creates too: one allocation for both
	for try := 0; ; try++ {
		unlock, waited, err := c.locks.lock(ctx, keyLockName(scope, key))
		if err != nil {
			return nil, &OperationError{Key: key, Scope: scope, Intent: op.intent, Kind: ErrCanceled, Cause: err}
		}
		if waited && op.intent == "" {
			c.stats.sameKey.Add(1)
		}
		held = unlock // released by the deferred Unlock, also when a store or clock panics
		rec, created, err := c.open(ctx, op, scope, &cl.own.rec)
		if err != nil { // the deferred Unlock releases the key
			if errors.Is(err, ErrKeyConflict) {
				c.onLocalKeyConflict(err)
			}
			if cerr := ctx.Err(); cerr != nil {
				return nil, &OperationError{Key: key, Scope: scope, Intent: op.intent, Kind: ErrCanceled, Cause: err}
			}
			return nil, err
		}
		if rec.Key != key && try < 3 { // another process bound the intent to its key meanwhile
			held = heldLock{}
			unlock.Unlock()
			key = rec.Key
			continue
		}
		if !created {
			if rec, err = c.resume(ctx, s, rec); err != nil {
				return nil, err
			}
		}
		if !created && rec.State != keystore.StatePending {
			res, err := c.storedOutcome(rec)
			if r, lerr, ok := c.businessLookup(ctx, rec, op.header, err); ok {
				return r, lerr
			}
			return res, err
		}
		return c.initCall(cl, s, rec, op.header, target).run(ctx, !created)
	}
}

// resume brings a record Do found, not created, to where the call can run or return its
// stored outcome: a withdrawn record of the intent is revived (revivable), a pending one is
// leased, waiting while another instance holds a live lease, and one withdrawn while Do
// waited is revived too: it was never sent, and ErrNotExecuted here would let the caller pay
// under a new intent while the intent's own retry sends it. A revival another instance made
// first (ErrFenced) is read again.
func (c *Client) resume(ctx context.Context, s callSettings, rec *keystore.Record) (*keystore.Record, error) {
	for range 3 {
		if revivable(rec) {
			// Resuming writes this clock's times on the record, as creating does (see open).
			if err := c.checkWriteClock(ctx, rec); errors.Is(err, ErrClockSkew) {
				return nil, &OperationError{Key: rec.Key, Scope: rec.Scope, Intent: rec.Intent, Kind: ErrClockSkew, Cause: err}
			}
			if err := c.revive(ctx, rec); errors.Is(err, keystore.ErrFenced) {
				var gerr error
				if rec, gerr = c.get(ctx, rec.Scope, rec.Key); gerr != nil {
					return nil, fmt.Errorf("idem: reading keystore: %w", gerr)
				}
				continue
			} else if err != nil {
				return nil, err
			}
		}
		if rec.State != keystore.StatePending {
			return rec, nil
		}
		if err := c.checkWriteClock(ctx, rec); errors.Is(err, ErrClockSkew) {
			return nil, &OperationError{Key: rec.Key, Scope: rec.Scope, Intent: rec.Intent, Kind: ErrClockSkew,
				Unknown: true, LastStatusCode: rec.LastStatusCode, Cause: err}
		}
		// Another instance may be sending it: take the lease, waiting while it is live.
		var err error
		if rec, err = c.acquire(ctx, s, rec); err != nil {
			return nil, err
		}
		if revivable(rec) { // withdrawn by its creator while we waited
			continue
		}
		// The resend carries the stored request: it must still be the one fingerprinted.
		if rec.State == keystore.StatePending {
			if err := c.checkStoredRequest(rec); err != nil {
				return nil, c.unsendable(ctx, rec, err).Err
			}
		}
		return rec, nil
	}
	return nil, fmt.Errorf("idem: the record of key %q kept changing while Do read it; nothing was sent", rec.Key)
}
