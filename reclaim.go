package idem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idem/keystore"
)

// Orphan reclaim: pending records that no instance holds a live lease on (their owner died,
// or a call gave up and released them) are taken with keystore.Store.ClaimExpired, which hands
// each record to one caller only, so that N instances reclaiming at once never send one key
// twice. Recover runs a pass first; Config.Fleet.ReclaimInterval runs passes in the background.

type scopedKey struct{ scope, key string }

// heldLease is a lease a reclaim pass keeps until its end: a record it left pending, so that
// its own next ClaimExpired does not hand it back in the same pass.
type heldLease struct {
	scope, key string
	fence      int64
	hold       time.Duration // kept this long after the pass (holdAfter), released if 0
}

// reclaimAhead is how many claimed records per worker a reclaim pass may hold before a
// worker starts them. A batch per idle worker made a pass over N records cost about N
// ClaimExpired calls, each scanning the store; claiming ahead makes it N/(reclaimAhead-1)
// per worker. A record waits at most reclaimAhead records' time before its call starts, far
// inside its lease, and a call that starts after its lease ended is fenced, never sent twice.
const reclaimAhead = 8

// reclaimPass claims orphans in batches of up to reclaimAhead per worker and reconciles each
// with a resumed call. out gets every record handled (ran false: a call of this process holds
// its key, so it was skipped). It returns the records it claimed, and the first ClaimExpired
// error. A panic of a record's call (the application's code) is kept in g, and the workers
// go on with the other records.
func (c *Client) reclaimPass(ctx context.Context, s callSettings, self int64, out func(Reconciled, bool), g *panicGuard) (map[scopedKey]bool, error) {
	workers := c.cfg.RecoverConcurrency
	pace := c.newPacer(self)
	claimed := make(map[scopedKey]bool)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		held []heldLease
	)
	hold := func(rec *keystore.Record, d time.Duration) {
		mu.Lock()
		held = append(held, heldLease{scope: rec.Scope, key: rec.Key, fence: rec.Fence, hold: d})
		mu.Unlock()
	}
	work := make(chan *keystore.Record, workers*reclaimAhead)
	taken := make(chan struct{}, 1) // a worker took a record from work
	for range workers {
		wg.Go(func() {
			for rec := range work {
				select {
				case taken <- struct{}{}:
				default:
				}
				if ctx.Err() != nil { // never started: released at the end, untouched
					hold(rec, 0)
					continue
				}
				g.run(func() {
					r, ran, pending := c.reclaimOne(ctx, s, rec)
					if pending {
						d := time.Duration(0)
						if ran && r.Record != nil {
							d = c.holdAfter(r.Err, r.Record.Attempts)
						}
						hold(rec, d)
					}
					out(r, ran)
				})
			}
		})
	}
	defer func() {
		close(work)
		wg.Wait()
		for _, h := range held { // fenced: another instance took it after our lease expired
			c.releaseOrHold(context.WithoutCancel(ctx), &keystore.Record{Scope: h.scope, Key: h.key}, h.fence, h.hold)
		}
	}()
	for ctx.Err() == nil {
		for len(work) > workers { // claim again once the queue is down to a round of work
			select {
			case <-taken:
			case <-ctx.Done():
				return claimed, nil
			}
		}
		n := cap(work) - len(work)
		err := c.checkClock(ctx, opReclaim, nil)
		var recs []*keystore.Record
		if err == nil {
			recs, err = c.store.ClaimExpired(ctx, c.lease(), n)
		}
		if err != nil {
			if ctx.Err() != nil {
				return claimed, nil
			}
			return claimed, err
		}
		fresh := 0
		for _, rec := range recs {
			name := scopedKey{rec.Scope, rec.Key}
			if claimed[name] { // handled in this pass and its lease ran out: hold, do not resend
				hold(rec, 0)
				continue
			}
			claimed[name] = true
			fresh++
			c.stats.orphans.Add(1)
			pace.wait(ctx, pace.delay()) // the cores go to live calls first
			work <- rec                  // room for n: only this loop sends
		}
		if len(recs) == 0 || (fresh == 0 && len(recs) < n) {
			break
		}
	}
	return claimed, nil
}

// reclaimOne reconciles rec, claimed by this client, under its key (and intent) lock. ran is
// false when a call of this process holds the key; pending reports that rec is still
// pending under this pass's lease, which the pass releases at its end.
func (c *Client) reclaimOne(ctx context.Context, s callSettings, rec *keystore.Record) (out Reconciled, ran, pending bool) {
	if rec.Intent != "" {
		unlock, ok := c.locks.tryLock(intentLockName(rec.Scope, rec.Intent))
		if !ok {
			return Reconciled{}, false, true
		}
		defer unlock()
	}
	unlock, ok := c.locks.tryLock(keyLockName(rec.Scope, rec.Key))
	if !ok {
		return Reconciled{}, false, true
	}
	defer unlock()
	// rec was claimed when its batch was; a Do of this process may have taken the key since
	// (a lease of its own owner) and finished it while rec waited in the queue. Only the
	// record as it is now, still under this claim, may be sent.
	fresh, err := c.get(ctx, rec.Scope, rec.Key)
	if err != nil { // unreadable now: held, and released (fenced) when the pass ends
		return Reconciled{}, false, true
	}
	if fresh.State != keystore.StatePending || fresh.Owner != rec.Owner || fresh.Fence != rec.Fence {
		return Reconciled{}, false, false
	}
	return c.reconcileClaimed(ctx, s, fresh, true)
}

// reconcileClaimed runs a resumed call on rec, claimed by this client, with its key locked.
// keep leaves the lease held when the record stays pending (the caller releases it).
func (c *Client) reconcileClaimed(ctx context.Context, s callSettings, rec *keystore.Record, keep bool) (Reconciled, bool, bool) {
	target, err := c.resolveURL(rec.Request.URL)
	if err == nil && !isToken(rec.Request.Method) {
		err = fmt.Errorf("%w: bad method %q", ErrInvalidOperation, rec.Request.Method)
	}
	if err == nil {
		err = c.checkStoredRequest(rec)
	}
	if err != nil { // a record this client can never send: a person must look at it
		return c.unsendable(ctx, rec, err), true, false
	}
	cl := c.newCall(s, rec, rec.Request.Header.Clone(), target)
	cl.lease.keep = keep
	res, err := cl.run(ctx, true)
	if err == nil {
		c.stats.recovered.Add(1)
	} else if errors.Is(err, ErrPermanent) || errors.Is(err, ErrKeyConflict) || errors.Is(err, ErrKeyExpired) ||
		errors.Is(err, ErrStoredServerError) || errors.Is(err, ErrNotExecuted) {
		c.stats.recovered.Add(1)
	}
	pending := cl.rec.State == keystore.StatePending && cl.leaseLost() == nil
	return Reconciled{Record: cl.rec.Clone(), Result: res, Err: err}, true, pending
}

// reclaimer runs background reclaim passes every Config.Fleet.ReclaimInterval until Close.
type reclaimer struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *Client) startReclaimer() {
	if c.cfg.Fleet.ReclaimInterval <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.reclaimer = reclaimer{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.reclaimer.done)
		t := time.NewTicker(c.cfg.Fleet.ReclaimInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				c.reclaimNow(ctx)
			}
		}
	}()
}

// reclaimNow runs one background pass with the client's default policy.
func (c *Client) reclaimNow(ctx context.Context) {
	s, err := c.settings(nil)
	if err != nil {
		c.warnf("background reclaim", err)
		return
	}
	if !s.noBudget && !c.budget.resendPossible(c.cfg.Now()) {
		// Every record it claimed would be handed back denied (a write each, and the
		// others' claims held back meanwhile): wait for the budget's tokens or its floor.
		return
	}
	var g panicGuard // no caller to raise it on: logged, and the pass went on without it
	g.run(func() {   // the pass's own store calls and hooks too (ClaimExpired, OnClockSkew)
		if _, err := c.reclaimPass(ctx, s, 0, func(Reconciled, bool) {}, &g); err != nil && !errors.Is(err, ErrClockSkew) {
			c.warnf("background reclaim", err) // a skew is reported already
		}
	})
	if err := g.err(); err != nil {
		c.warnf("background reclaim: the application's code panicked reconciling a record", err)
	}
}

// stopReclaimer stops the background passes and waits for one under way: its calls see
// their context cancelled and stop as Do does (records stay pending, leases released).
func (c *Client) stopReclaimer() {
	if c.reclaimer.cancel == nil {
		return
	}
	c.reclaimer.cancel()
	<-c.reclaimer.done
}
