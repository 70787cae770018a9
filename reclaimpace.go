package idem

import (
	"context"
	"fmt"
	"time"
)

// Recover's pace beside live calls. A Recover of many orphans runs its workers, their HTTP
// calls and the final writes flat out: on a small machine the process then wants more cores
// than it has, and the store's committer, which every durable Do waits for, waits to be
// scheduled again after each of its syscalls (docs/PERFORMANCE.md section j). While Do calls
// are in flight a reclaim pass therefore starts at most Config.RecoverBusyRate records per second;
// with no call in flight it runs unpaced. The pace never stops a pass, so a pass finishes
// under any steady traffic.

// defaultRecoverBusyRate is Config.RecoverBusyRate's default, in records per second.
const defaultRecoverBusyRate = 6500

// checkBusyRate refuses a Config.RecoverBusyRate so low that pacing one claimed batch
// (RecoverConcurrency × reclaimAhead records, claimed before they are queued) would take more
// than a tenth of Fleet.LeaseTTL: their leases would run out in the queue and another
// instance could take them while this one still means to send them.
func (c *Client) checkBusyRate() error {
	rate := c.cfg.RecoverBusyRate
	if rate < 0 {
		return nil
	}
	batch := c.cfg.RecoverConcurrency * reclaimAhead
	if time.Duration(batch)*time.Second/time.Duration(rate) > c.cfg.Fleet.LeaseTTL/10 {
		return fmt.Errorf("%w: RecoverBusyRate %d records/s would take more than a tenth of Fleet.LeaseTTL %s to start a batch of %d claimed records (RecoverConcurrency × %d): raise it, or set it negative to turn the pace off",
			ErrInvalidConfig, rate, c.cfg.Fleet.LeaseTTL, batch, reclaimAhead)
	}
	return nil
}

// reclaimPaceMin is the shortest wait a pacer sleeps: shorter debts accumulate, so the pass
// runs in short bursts instead of waking a timer per record.
const reclaimPaceMin = time.Millisecond

// pacer spaces the starts of a reclaim pass's records while busy reports calls in flight.
// Only the pass's claim loop uses it.
type pacer struct {
	every time.Duration                        // the time one record start costs while busy
	busy  func() bool                          // whether Do calls are in flight
	now   func() time.Time                     // the monotonic clock (time.Now)
	next  time.Time                            // when the next record may start while busy
	sleep func(context.Context, time.Duration) // nil: a timer; tests put a clock's here
}

// newPacer returns the pacer of a pass run by c; self is how many of c's running calls the
// pass itself counts (1 for Recover, which enters as a call, 0 for a background pass).
func (c *Client) newPacer(self int64) *pacer {
	rate := c.cfg.RecoverBusyRate
	p := &pacer{
		every: time.Second / time.Duration(max(rate, 1)),
		busy:  func() bool { return rate > 0 && c.owner.running.Load() > self },
		now:   time.Now,
	}
	if c.pacerHook != nil {
		c.pacerHook(p)
	}
	return p
}

// delay records one record start and returns how long to wait before it: 0 while no call is
// in flight, else the debt of the starts made faster than every, once it reaches
// reclaimPaceMin. Starts made while idle leave no debt and earn no credit; a pass slower than
// the pace earns at most reclaimPaceMin of credit (a timer that woke late).
func (p *pacer) delay() time.Duration {
	now := p.now()
	if !p.busy() {
		p.next = now
		return 0
	}
	if earliest := now.Add(-reclaimPaceMin); p.next.Before(earliest) {
		p.next = earliest // a timer's overshoot is made up, a longer pause is not
	}
	p.next = p.next.Add(p.every)
	if d := p.next.Sub(now) - p.every; d >= reclaimPaceMin {
		return d
	}
	return 0
}

// wait sleeps d, or until ctx ends.
func (p *pacer) wait(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	if p.sleep != nil {
		p.sleep(ctx, d)
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
