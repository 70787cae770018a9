package idem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/cenkalti/backoff/v4"

	"github.com/idemkit/idem/keystore"
)

// The client's side of the keystore's fleet contract (keystore.Lease): every call sends only
// while it holds the record's lease, renews it while it runs, and stops for good once a
// fenced write tells it that another instance took the record over.

// DefaultLeaseTTL is the lease a call holds on its record when Config.LeaseTTL is 0: long
// enough for an attempt (Policy.AttemptTimeout, 10 s by default) and a renewal round trip,
// short enough that a dead instance's records are picked up by the others within a minute.
const DefaultLeaseTTL = 30 * time.Second

// ErrLeaseLost: the call stopped because it no longer holds the record's lease: another
// instance claimed the record after this one's lease expired (Cause matches
// keystore.ErrFenced), or the keystore refused the renewal a resend needs (Cause is the
// store's error). Nothing more is sent by this call and its final state is not written: the
// new owner (or a later Do or Recover) finishes the record. OperationError.Unknown is set
// when a request of this call may have executed. Stats.ClaimsLost counts the fenced case.
var ErrLeaseLost = errors.New("idem: lease on the record lost to another instance")

// ClaimLostEvent: a fenced write told the call that another instance holds the record now.
type ClaimLostEvent struct {
	Event
	Fence   int64  // the token this call held
	Current int64  // the stored token (0 if unknown)
	Owner   string // the instance that holds the record now ("" if released or unknown)
}

// defaultOwner names this process and Client: host, pid and 8 random bytes, so that a
// restarted process, or a second Client in one process, never shares an owner id.
func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// leaseDefaults fills and checks Owner, LeaseTTL and ReclaimInterval.
func (c *Client) leaseDefaults() error {
	cfg := &c.cfg
	if cfg.LeaseTTL < 0 || cfg.ReclaimInterval < 0 {
		return fmt.Errorf("%w: LeaseTTL and ReclaimInterval must not be negative", ErrInvalidConfig)
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.LeaseTTL <= c.policy.AttemptTimeout {
		return fmt.Errorf("%w: LeaseTTL %s is not longer than Policy.AttemptTimeout %s: an attempt could outlive the lease and overlap another instance's",
			ErrInvalidConfig, cfg.LeaseTTL, c.policy.AttemptTimeout)
	}
	if cfg.Owner == "" {
		cfg.Owner = defaultOwner()
	}
	if !utf8.ValidString(cfg.Owner) { // a keystore could not store it unchanged
		return fmt.Errorf("%w: Owner is not valid UTF-8", ErrInvalidConfig)
	}
	return nil
}

// Owner returns the owner id this client claims records under (Config.Owner or its default;
// "" for a nil Client).
func (c *Client) Owner() string {
	if c == nil {
		return ""
	}
	return c.cfg.Owner
}

// lease is the lease a claim made now asks for.
func (c *Client) lease() keystore.Lease {
	now := c.cfg.Now()
	return keystore.Lease{Owner: c.cfg.Owner, Now: now, Until: now.Add(c.cfg.LeaseTTL)}
}

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
		r.every = cl.c.cfg.LeaseTTL / 3
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
	until := cl.c.cfg.Now().Add(cl.c.cfg.LeaseTTL)
	err := cl.c.store.Renew(ctx, cl.rec.Scope, cl.rec.Key, cl.c.cfg.Owner, cl.lease.fence, until)
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
	ev := ClaimLostEvent{Event: Event{Key: cl.rec.Key, Scope: cl.rec.Scope, Intent: cl.rec.Intent, Time: c.cfg.Now()},
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

// deadOwner reports whether rec's lease, live or not, belongs to an instance that has ended:
// the store is exclusive to this process and no Client of this process has that owner id.
func (c *Client) deadOwner(rec *keystore.Record) bool {
	if rec.Owner == "" || rec.Owner == c.cfg.Owner {
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
			l.Until = l.Now.Add(c.cfg.LeaseTTL)
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
	return min(d, c.cfg.LeaseTTL)
}

// releaseOrHold ends this client's lease on rec (at fence) after a call left it pending:
// released when hold is 0, else kept until now+hold (see holdAfter). Fenced: another
// instance may have taken the record already.
func (c *Client) releaseOrHold(ctx context.Context, rec *keystore.Record, fence int64, hold time.Duration) {
	var err error
	if hold > 0 {
		until := c.cfg.Now().Add(hold)
		err = c.store.Renew(ctx, rec.Scope, rec.Key, c.cfg.Owner, fence, until)
		if err == nil {
			c.holds.add(scopedKey{rec.Scope, rec.Key}, fence, until, c.cfg.Now())
		}
	} else {
		err = c.store.Release(ctx, rec.Scope, rec.Key, c.cfg.Owner, fence)
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
		err := c.store.Release(context.Background(), k.scope, k.key, c.cfg.Owner, v.fence)
		if err != nil && !errors.Is(err, keystore.ErrFenced) && !errors.Is(err, keystore.ErrNotPending) {
			c.warnf("releasing a held lease at Close", fmt.Errorf("key %q: %w", k.key, err))
		}
	}
}
