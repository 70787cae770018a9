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
	liveOwners.Store(cfg.Owner, struct{}{})
	return nil
}

// Owner returns the owner id this client claims records under (Config.Owner or its default).
func (c *Client) Owner() string { return c.cfg.Owner }

// lease is the lease a claim made now asks for.
func (c *Client) lease() keystore.Lease {
	now := c.cfg.Now()
	return keystore.Lease{Owner: c.cfg.Owner, Now: now, Until: now.Add(c.cfg.LeaseTTL)}
}

// callLease is the lease state of one call. The renewal goroutine and the call share it.
type callLease struct {
	fence int64
	until atomic.Int64 // LeaseUntil last confirmed by the store, Unix nanoseconds
	keep  bool         // do not release at the end (Recover releases after its pass)

	mu   sync.Mutex
	lost error // why the lease is gone, nil while held

	cancel context.CancelCauseFunc
	stop   chan struct{}
	done   chan struct{}
}

// errLeaseGone is the cause of a call context cancelled because its lease was lost.
var errLeaseGone = errors.New("idem: lease lost")

// startLease derives the call's context, cancelled at once if the lease is lost, and starts
// renewing the lease every LeaseTTL/3 until endLease.
func (cl *call) startLease(ctx context.Context) context.Context {
	l := &cl.lease
	l.fence = cl.rec.Fence
	l.until.Store(cl.rec.LeaseUntil.UnixNano())
	ctx, l.cancel = context.WithCancelCause(ctx)
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	go cl.renewLoop(context.WithoutCancel(ctx), cl.c.cfg.LeaseTTL/3)
	return ctx
}

func (cl *call) renewLoop(ctx context.Context, every time.Duration) {
	defer close(cl.lease.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-cl.lease.stop:
			return
		case <-t.C:
			if err := cl.renew(ctx); err != nil && cl.leaseLost() == nil {
				cl.c.warn("renewing lease", cl.rec, err) // retried at the next tick
			}
		}
	}
}

// endLease stops the renewals; the call writes no more lease changes after it except
// Release. The call's context stays usable (a business lookup may follow).
func (cl *call) endLease() {
	l := &cl.lease
	if l.stop == nil {
		return
	}
	close(l.stop)
	<-l.done
	l.stop = nil
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

// loseLease records that another instance holds the record now: the call's context is
// cancelled, so an attempt in flight stops at once, and nothing more is sent or written.
func (cl *call) loseLease(err error) {
	l := &cl.lease
	l.mu.Lock()
	first := l.lost == nil
	if first {
		l.lost = err
	}
	l.mu.Unlock()
	if !first {
		return
	}
	if l.cancel != nil {
		l.cancel(errLeaseGone)
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
	err := cl.c.store.Release(ctx, cl.rec.Scope, cl.rec.Key, cl.c.cfg.Owner, cl.lease.fence)
	if err != nil && !errors.Is(err, keystore.ErrFenced) {
		cl.c.warn("releasing lease", cl.rec, err)
	}
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

// liveOwners holds the owner ids of the Clients created in this process. On an exclusive
// store (keystore.Exclusive) a lease held by any other owner was left by an ended process.
var liveOwners sync.Map

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
	_, live := liveOwners.Load(rec.Owner)
	return !live
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
