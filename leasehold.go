package idem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/idemkit/idem/keystore"
)

// Whose lease a record holds, and how long a call that gave up keeps it (a hold), so that no
// reclaim pass resends it sooner.

// deadOwner reports whether rec's lease, live or not, belongs to an instance that has ended:
// the store is exclusive to this process and no Client of this process has that owner id.
func (c *Client) deadOwner(rec *keystore.Record) bool {
	if rec.Owner == "" || rec.Owner == c.cfg.Fleet.Owner {
		return false
	}
	x, ok := c.store.(keystore.Exclusive)
	if !ok || !x.Exclusive() {
		return false
	}
	return !ownerLive(rec.Owner)
}

// leaseFor is the lease to Claim rec with: c.lease(), except that the lease of a dead owner
// (deadOwner) is treated as expired: the claim's Now is set past it.
func (c *Client) leaseFor(rec *keystore.Record) keystore.Lease {
	l := c.lease()
	if c.deadOwner(rec) && !l.Now.After(rec.LeaseUntil) {
		l.Now = rec.LeaseUntil.Add(time.Nanosecond)
		if !l.Until.After(l.Now) {
			l.Until = l.Now.Add(c.cfg.Fleet.LeaseTTL)
		}
	}
	return l
}

// holdAfter is how long a record a call left pending stays leased to this client after the
// call, instead of being released at once: the wait the server asked for (Retry-After), or
// the policy's backoff for the record's attempts so far, at most LeaseTTL; 0 when the caller
// gave up (canceled, or its deadline passed without a Retry-After), so that another instance
// may go on at once. Released at once, a record a call gave up on (an API down or
// throttling) was taken again by the next reclaim pass of any instance, every
// ReclaimInterval, whatever the server had asked: a fleet hammered an API that asked it to
// wait an hour. A Do or Recover of this client still takes its own held record at once;
// other instances wait for the hold like for any lease.
func (c *Client) holdAfter(stop error, attempts int) time.Duration {
	var e *OperationError
	if !errors.As(stop, &e) {
		return 0
	}
	var d time.Duration
	switch {
	case e.RetryAfter > 0:
		d = e.RetryAfter
	case e.Kind == ErrCanceled || e.Kind == ErrDeadline || e.Kind == ErrLeaseLost:
		return 0
	default: // the policy's schedule without jitter: a hold is a window, not a retry
		p := c.policy
		b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(p.InitialDelay),
			backoff.WithMultiplier(p.Multiplier), backoff.WithRandomizationFactor(0),
			backoff.WithMaxInterval(p.MaxDelay), backoff.WithMaxElapsedTime(0))
		d = b.NextBackOff()
		for i := 1; i < attempts; i++ {
			d = b.NextBackOff()
		}
	}
	return min(d, c.cfg.Fleet.LeaseTTL)
}

// releaseOrHold ends this client's lease on rec (at fence) after a call left it pending:
// released when hold is 0, else kept until now+hold (see holdAfter). Fenced: another
// instance may have taken the record already.
func (c *Client) releaseOrHold(ctx context.Context, rec *keystore.Record, fence int64, hold time.Duration) {
	var err error
	if hold > 0 {
		until := c.cfg.Now().Add(hold)
		err = c.store.Renew(ctx, rec.Scope, rec.Key, c.cfg.Fleet.Owner, fence, until)
		if err == nil {
			c.holds.add(scopedKey{rec.Scope, rec.Key}, fence, until, c.cfg.Now())
		}
	} else {
		err = c.store.Release(ctx, rec.Scope, rec.Key, c.cfg.Fleet.Owner, fence)
	}
	if err != nil && !errors.Is(err, keystore.ErrFenced) {
		c.warn("ending the lease of a pending record", rec, err)
	}
}

// holds are the leases a client keeps on records its calls left pending (releaseOrHold),
// while they last. Close releases them: they pace this process's and the others' reclaim
// passes, and a process that stops has no reason to keep its successor's start-up Recover
// (a new Owner) from taking the records at once.
type holds struct {
	mu sync.Mutex
	m  map[scopedKey]heldUntil
}

type heldUntil struct {
	fence int64
	until time.Time
}

// add records a hold, dropping the ones that have ended once the map has grown.
func (h *holds) add(k scopedKey, fence int64, until, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[scopedKey]heldUntil)
	}
	if len(h.m) >= 1024 {
		for k, v := range h.m {
			if !v.until.After(now) {
				delete(h.m, k)
			}
		}
	}
	h.m[k] = heldUntil{fence, until}
}

// releaseHolds releases the holds still running at Close. Fenced: a record claimed since
// (by a later call of this client, or another instance) is left as it is.
func (c *Client) releaseHolds() {
	h := &c.holds
	h.mu.Lock()
	m := h.m
	h.m = nil
	h.mu.Unlock()
	if len(m) == 0 { // a zero Client has no clock either
		return
	}
	now := c.cfg.Now()
	for k, v := range m {
		if !v.until.After(now) {
			continue
		}
		err := c.store.Release(context.Background(), k.scope, k.key, c.cfg.Fleet.Owner, v.fence)
		if err != nil && !errors.Is(err, keystore.ErrFenced) && !errors.Is(err, keystore.ErrNotPending) {
			c.warnf("releasing a held lease at Close", fmt.Errorf("key %q: %w", k.key, err))
		}
	}
}
