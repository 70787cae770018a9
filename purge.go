package idem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/keystore"
)

// Background retention purge defaults.
const (
	defaultPurgeInterval = time.Minute // how often a running client purges old records
	defaultPurgeBatch    = 256         // records one purge step examines
)

// purger runs at most one retention pass at a time, off the call path.
type purger struct {
	next    atomic.Int64 // Config.Now in Unix nanoseconds before which no pass starts
	running atomic.Bool
	mu      sync.Mutex
	closed  bool
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	batches atomic.Int64 // purge steps run, for tests and Stats
	purged  atomic.Int64 // records deleted by background passes
}

func (c *Client) purgeDefaults() error {
	if c.cfg.PurgeBatch < 0 {
		return fmt.Errorf("%w: PurgeBatch must not be negative", ErrInvalidConfig)
	}
	if c.cfg.PurgeBatch == 0 {
		c.cfg.PurgeBatch = defaultPurgeBatch
	}
	if c.cfg.PurgeInterval == 0 {
		c.cfg.PurgeInterval = defaultPurgeInterval
	}
	c.purger.ctx, c.purger.cancel = context.WithCancel(context.Background())
	// The first pass is due one interval after start: a short-lived client never starts one.
	c.purger.next.Store(c.cfg.Now().Add(c.cfg.PurgeInterval).UnixNano())
	return nil
}

// maybePurge starts a background retention pass when one is due and none is running. It
// costs a clock read and an atomic load when nothing is due.
func (c *Client) maybePurge() {
	p := &c.purger
	if c.cfg.PurgeInterval < 0 {
		return
	}
	now := c.cfg.Now()
	if now.UnixNano() < p.next.Load() || !p.running.CompareAndSwap(false, true) {
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.running.Store(false)
		return
	}
	p.next.Store(now.Add(c.cfg.PurgeInterval).UnixNano())
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		defer p.running.Store(false)
		var g panicGuard // the store or a hook (OnClockSkew): no caller to raise it on
		g.run(func() {
			checked, _, err := c.checkClockAt(p.ctx, opPurge, nil)
			if err != nil {
				if p.ctx.Err() == nil && !errors.Is(err, ErrClockSkew) { // a skew is reported already
					c.warnf("background retention purge", err)
				}
				return
			}
			n, err := c.purgeOld(p.ctx, checked.Add(-c.cfg.Retention)) // the instant checked
			p.purged.Add(int64(n))
			if err != nil && p.ctx.Err() == nil {
				c.warnf("background retention purge", err)
			}
		})
		if err := g.err(); err != nil {
			c.warnf("background retention purge: the application's code panicked", err)
		}
	}()
}

// purgeOld deletes the terminal records last updated before cutoff (the caller has checked
// its clock, checkClock): in steps of
// Config.PurgeBatch when the store is a keystore.BatchPurger, so that writes of live calls
// wait at most for one step, else with one Purge.
func (c *Client) purgeOld(ctx context.Context, cutoff time.Time) (int, error) {
	bp, ok := c.store.(keystore.BatchPurger)
	if !ok {
		return c.store.Purge(ctx, cutoff)
	}
	total := 0
	var after keystore.Cursor
	for {
		n, next, err := bp.PurgeBatch(ctx, cutoff, after, c.cfg.PurgeBatch)
		c.purger.batches.Add(1)
		total += n
		if err != nil || next == "" {
			return total, err
		}
		after = next
	}
}

// Close stops the background retention purge and the background reclaimer
// (Config.Fleet.ReclaimInterval), and waits for a pass under way to stop after its current step.
// It releases the leases it still keeps on records its calls left pending (see
// Config.Fleet.LeaseTTL), so that the next process's Recover takes them at once. It does not close
// the Store, which the caller owns. Do and Recover still work after Close;
// they only no longer start background passes. Close always returns nil.
func (c *Client) Close() error {
	if c == nil {
		return nil
	}
	c.stopReclaimer()
	c.stopRenewer()
	c.releaseHolds()
	c.closeOwner()
	p := &c.purger
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	if p.cancel != nil { // a zero Client never started a purge
		p.cancel()
	}
	p.wg.Wait()
	return nil
}

func (c *Client) warnf(msg string, err error) {
	if l := c.cfg.Logger; l != nil {
		l.Warn("idem "+msg, "error", err)
	}
}
