package boltstore

import (
	"context"

	"go.etcd.io/bbolt"
)

// Background writes give way to live ones. A Recover after an outage claims records with
// ClaimExpired as fast as its workers take them: each claim commit rewrites up to
// maxClaimsPerCommit records with their index entries (about 50 pages of the file), and a
// call's Create that arrived meanwhile waited for all of it, then for its own commit. Measured
// with a trace of every commit during a Recover of 30,000 records (docs/PERFORMANCE.md,
// section j): a claim commit took 2.3 ms at the median against 1.1 ms for the others, a Create
// waited 1-5 ms behind one, and one commit in three of the calls' commits carried a claim.
// So a claim commit is a background op:
//
//   - a commit that has a live writer to serve (a caller waiting in do) leaves the queued
//     background ops for the next commit, so a claim never shares a commit with a call, nor
//     goes ahead of one; a background op is passed over at most maxBackgroundPasses times,
//     so that steady traffic cannot starve a recovery;
//   - leadership goes to the first queued live writer before any background op;
//   - a claim commit stops taking records once minClaimsPerCommit are taken and a live writer
//     is waiting (callsWaiting), and ClaimExpired claims the rest in its next commit, after
//     that writer's. An idle pipeline still claims maxClaimsPerCommit records a commit.
//
// The order of writes stays one a caller can observe: a background op is only ever passed by
// ops queued while it waited (concurrent with it, so either order is a valid history), and
// deferred writes are never held back, so one queued before a claim commits no later.

// maxBackgroundPasses bounds how many commits may leave one background op queued for live
// writers before it is committed with them.
const maxBackgroundPasses = 4

// doBackground is do for a background write: it gives way to live writers (see above).
func (c *committer) doBackground(ctx context.Context, apply func(tx *bbolt.Tx) error) error {
	return c.run(ctx, &op{apply: apply, wake: make(chan struct{}, 1), background: true})
}

// callsWaiting reports whether a live writer waits for a commit: queued for the next one, or
// in the batch being committed (a background op that led a commit before a live writer
// arrived shares it with that writer). It needs no lock: a background op's apply polls it to
// end its commit early.
func (c *committer) callsWaiting() bool {
	return c.live.Load() > 0 || c.batchLive.Load()
}

// takeLocked removes from the queue and returns the ops of the next commit: every queued op,
// except background ops (other than lead) when a live writer is queued and they were passed
// over fewer than maxBackgroundPasses times. c.mu is held.
func (c *committer) takeLocked(lead *op) []*op {
	c.batchLive.Store(c.live.Load() > 0)
	if c.live.Load() == 0 || !c.hasBackgroundLocked(lead) {
		batch := c.queue
		c.queue = nil
		c.live.Store(0)
		return batch
	}
	var batch, rest []*op
	for _, o := range c.queue {
		if o.background && o != lead && o.passed < maxBackgroundPasses {
			o.passed++
			rest = append(rest, o)
			continue
		}
		batch = append(batch, o)
	}
	c.queue = rest
	c.live.Store(0) // every live writer queued is in the batch
	return batch
}

// hasBackgroundLocked reports whether the queue holds a background op other than lead.
func (c *committer) hasBackgroundLocked(lead *op) bool {
	for _, o := range c.queue {
		if o.background && o != lead {
			return true
		}
	}
	return false
}
