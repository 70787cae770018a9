package idem

import (
	"sync"
	"sync/atomic"
)

// liveOwners counts, per owner id, the Clients of this process that may still hold leases
// under it. On an exclusive store (keystore.Exclusive) a lease held by an owner not counted
// here was left by an ended process, or by a Client of this one that is closed and has no
// call running: it is taken over at once instead of after LeaseTTL.
var liveOwners struct {
	sync.Mutex
	n map[string]int
}

func ownerLive(owner string) bool {
	liveOwners.Lock()
	defer liveOwners.Unlock()
	return liveOwners.n[owner] > 0
}

// ownerHold is a Client's claim on its owner id: held while the Client is open, and after
// Close while a Do or Recover of it runs (it may still send, or leave a lease behind).
type ownerHold struct {
	mu      sync.Mutex
	held    bool
	closed  atomic.Bool
	running atomic.Int64 // Do and Recover calls under way
}

// holdOwner counts c's owner live, once. h.mu is held.
func (c *Client) holdOwner() {
	h := &c.owner
	if h.held {
		return
	}
	h.held = true
	liveOwners.Lock()
	if liveOwners.n == nil {
		liveOwners.n = map[string]int{}
	}
	liveOwners.n[c.cfg.Fleet.Owner]++
	liveOwners.Unlock()
}

// releaseOwner undoes holdOwner. h.mu is held.
func (c *Client) releaseOwner() {
	h := &c.owner
	if !h.held {
		return
	}
	h.held = false
	liveOwners.Lock()
	if liveOwners.n[c.cfg.Fleet.Owner]--; liveOwners.n[c.cfg.Fleet.Owner] <= 0 {
		delete(liveOwners.n, c.cfg.Fleet.Owner)
	}
	liveOwners.Unlock()
}

// enter marks a Do or Recover under way; exit must follow. A closed Client holds its owner
// again while it runs. The counter is raised before closed is read, and Close sets closed
// before it reads the counter, so one of the two always sees the other.
func (c *Client) enter() {
	h := &c.owner
	h.running.Add(1)
	if h.closed.Load() {
		h.mu.Lock()
		c.holdOwner()
		h.mu.Unlock()
	}
}

func (c *Client) exit() {
	h := &c.owner
	if h.running.Add(-1) == 0 && h.closed.Load() {
		h.mu.Lock()
		if h.running.Load() == 0 {
			c.releaseOwner()
		}
		h.mu.Unlock()
	}
}

// closeOwner is Close's part: the owner stays live until the last running call exits.
func (c *Client) closeOwner() {
	h := &c.owner
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed.Store(true)
	if h.running.Load() == 0 {
		c.releaseOwner()
	}
}
