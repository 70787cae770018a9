package idem

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/event"
	"github.com/idemkit/idem/keystore"
)

// A call's lease on its record: renewed while the call runs (one renewer per Client), and
// lost to another instance's claim, which stops the call.

// callLease is the lease state of one call. The client's renewer and the call share it.
type callLease struct {
	fence int64
	until atomic.Int64 // LeaseUntil last confirmed by the store, Unix nanoseconds
	keep  bool         // do not release at the end (Recover releases after its pass)

	mu   sync.Mutex
	lost error // why the lease is gone, nil while held

	interrupt  []context.CancelFunc  // cancel the attempt or waits under way (interruptible), innermost last
	ibuf       [3]context.CancelFunc // interrupt's room: an attempt, or a status check and its wait
	ctx        context.Context       // the call's context, for the renewer's store writes
	registered bool                  // with the client's renewer, between startLease and endLease
	renewing   bool                  // a renewal of this call is running (guarded by renewer.mu)
}

// renewer renews the leases of a Client's running calls every LeaseTTL/3. One timer serves
// them all, armed only while calls run: most calls end in microseconds, long before their
// first renewal is due, and then cost a map insert and delete instead of a goroutine and a
// ticker each.
type renewer struct {
	mu    sync.Mutex
	done  sync.Cond           // a renewal ended (endLease waits for its call's)
	calls map[*call]time.Time // running calls and when each one's next renewal is due
	timer *time.Timer         // runs renewDue; armed while calls is not empty
	armed bool
	every time.Duration // LeaseTTL/3
}

// startLease has the client's renewer renew the lease every LeaseTTL/3 until endLease.
func (cl *call) startLease(ctx context.Context) {
	l := &cl.lease
	l.fence = cl.rec.Fence
	l.until.Store(cl.rec.LeaseUntil.UnixNano())
	l.ctx = ctx
	l.registered = true
	r := &cl.c.renewer
	r.mu.Lock()
	if r.calls == nil {
		r.calls = make(map[*call]time.Time)
		r.done.L = &r.mu
	}
	if r.every == 0 { // preset only by tests
		r.every = cl.c.cfg.Fleet.LeaseTTL / 3
	}
	r.calls[cl] = time.Now().Add(r.every)
	if !r.armed {
		r.armed = true
		if r.timer == nil {
			r.timer = time.AfterFunc(r.every, cl.c.renewDue)
		} else {
			r.timer.Reset(r.every)
		}
	}
	r.mu.Unlock()
}

// interruptible derives from ctx the context of one attempt (ending after timeout, if not 0)
// or one wait of the call, which a lost lease cancels at once: a call whose record another
// instance took over stops sending and waiting. Only what the call is doing right now can
// be interrupted, so the call's own context is not wrapped (that costs every call a
// cancellable context); endInterruptible releases it.
func (cl *call) interruptible(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	var cancel context.CancelFunc
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	l := &cl.lease
	l.mu.Lock()
	if l.interrupt == nil {
		l.interrupt = l.ibuf[:0]
	}
	l.interrupt = append(l.interrupt, cancel) // popped by endInterruptible even when lost
	lost := l.lost != nil
	l.mu.Unlock()
	if lost {
		cancel()
	}
	return ctx, cancel
}

// endInterruptible ends what the innermost interruptible began.
func (cl *call) endInterruptible(cancel context.CancelFunc) {
	l := &cl.lease
	l.mu.Lock()
	l.interrupt[len(l.interrupt)-1] = nil
	l.interrupt = l.interrupt[:len(l.interrupt)-1]
	l.mu.Unlock()
	cancel()
}

// renewDue runs on the renewer's timer: it renews every call whose renewal is due, each on
// its own goroutine (one slow store round trip must not delay the others), and arms the
// timer for the next one due.
func (c *Client) renewDue() {
	r := &c.renewer
	now := time.Now()
	var due []*call
	r.mu.Lock()
	for cl, at := range r.calls {
		if !at.After(now) {
			cl.lease.renewing = true
			r.calls[cl] = now.Add(r.every)
			due = append(due, cl)
		}
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, cl := range due {
		wg.Go(func() {
			var g panicGuard // a store's Renew or Hooks.OnClaimLost: no caller to raise it on
			g.run(func() {
				if err := cl.renew(context.WithoutCancel(cl.lease.ctx)); err != nil && cl.leaseLost() == nil {
					cl.c.warn("renewing lease", cl.rec, err) // retried when it is due again
				}
			})
			if err := g.err(); err != nil {
				cl.c.warn("renewing lease: the application's code panicked", cl.rec, err)
			}
			r.mu.Lock()
			cl.lease.renewing = false // its endLease need not wait for the others' renewals
			r.mu.Unlock()
			r.done.Broadcast()
		})
	}
	wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) == 0 || r.timer == nil {
		r.armed = false
		return
	}
	next := time.Time{}
	for _, at := range r.calls {
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	r.timer.Reset(max(time.Until(next), 0))
}

// stopRenewer stops the renewer's timer (Close) unless a call still runs: Do and Recover
// work after Close, and their leases must be renewed; once the last ends, the timer's next
// run finds none and stops.
func (c *Client) stopRenewer() {
	r := &c.renewer
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil && len(r.calls) == 0 {
		r.timer.Stop()
		r.armed = false
	}
}

// endLease stops the renewals, waiting for one in flight; the call writes no more lease
// changes after it except Release. The call's context stays usable (a business lookup may
// follow).
func (cl *call) endLease() {
	l := &cl.lease
	if !l.registered {
		return
	}
	l.registered = false
	r := &cl.c.renewer
	r.mu.Lock()
	for l.renewing {
		r.done.Wait()
	}
	delete(r.calls, cl)
	r.mu.Unlock()
}

// renew extends the lease to now+LeaseTTL. A fenced refusal marks the lease lost.
func (cl *call) renew(ctx context.Context) error {
	if err := cl.leaseLost(); err != nil {
		return err
	}
	until := cl.c.cfg.Now().Add(cl.c.cfg.Fleet.LeaseTTL)
	err := cl.c.store.Renew(ctx, cl.rec.Scope, cl.rec.Key, cl.c.cfg.Fleet.Owner, cl.lease.fence, until)
	if err == nil {
		cl.lease.until.Store(until.UnixNano())
		return nil
	}
	if errors.Is(err, keystore.ErrFenced) {
		cl.loseLease(err)
	}
	return err
}

// loseLease records that another instance holds the record now: an attempt in flight or a
// wait stops at once (interruptible), and nothing more is sent or written.
func (cl *call) loseLease(err error) {
	l := &cl.lease
	l.mu.Lock()
	first := l.lost == nil
	var interrupt []context.CancelFunc
	if first {
		l.lost = err
		interrupt = append(interrupt, l.interrupt...) // called outside l.mu
	}
	l.mu.Unlock()
	if !first {
		return
	}
	for _, f := range interrupt {
		f()
	}
	cl.c.onClaimLost(cl, err)
}

// leaseLost returns why the lease is gone, nil while the call holds it.
func (cl *call) leaseLost() error {
	cl.lease.mu.Lock()
	defer cl.lease.mu.Unlock()
	return cl.lease.lost
}

// guardSend runs before every request of the call: it refuses once the lease is lost, and
// renews first when the confirmed lease would end before the attempt could (after a long
// wait or status checks), so that an attempt never runs outside the call's lease.
func (cl *call) guardSend(ctx context.Context) error {
	if err := cl.leaseLost(); err != nil {
		return err
	}
	need := cl.c.cfg.Now().Add(cl.s.policy.AttemptTimeout)
	if need.UnixNano() < cl.lease.until.Load() {
		return nil
	}
	return cl.renew(context.WithoutCancel(ctx))
}

// stopLeaseLost ends the call with ErrLeaseLost.
func (cl *call) stopLeaseLost(cause error) {
	cl.stop = &OperationError{Kind: ErrLeaseLost, Cause: cause}
}

// release ends the call's lease on a record it leaves pending, so that another instance's
// Recover (or reclaimer) may take it at once instead of after LeaseTTL. A fenced refusal
// only means someone took it already.
func (cl *call) release(ctx context.Context) {
	cl.c.releaseOrHold(ctx, cl.rec, cl.lease.fence, 0)
}

func (c *Client) onClaimLost(cl *call, err error) {
	c.stats.claimsLost.Add(1)
	// Called from the renewal goroutine too: only the record's immutable fields are read.
	ev := event.ClaimLost{Event: event.Event{Key: cl.rec.Key, Scope: cl.rec.Scope, Intent: cl.rec.Intent, Time: c.cfg.Now()},
		Fence: cl.lease.fence}
	var fe *keystore.FencedError
	if errors.As(err, &fe) {
		ev.Current, ev.Owner = fe.Current, fe.Owner
	}
	if l := c.cfg.Logger; l != nil {
		l.Warn("idem lease lost to another instance; this call stops sending", "key", cl.rec.Key,
			"fence", ev.Fence, "current_fence", ev.Current, "owner", ev.Owner)
	}
	if h := c.cfg.Hooks.OnClaimLost; h != nil {
		h(ev)
	}
}
