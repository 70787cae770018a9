package idemserver

import (
	"context"
	"sync"
	"time"
)

// lazyDeadline is context.WithTimeout(context.WithoutCancel(parent), d) whose timer is made
// only when something waits on it (Done): the memory backend stores an answer without ever
// waiting, and a timer, its cancel context and its closure were a sixth of a request's
// allocations. Err reports the deadline from the clock until then, so every caller sees the
// same context either way. Value lookups go to the detached parent.
type lazyDeadline struct {
	context.Context // context.WithoutCancel of the request's context
	deadline        time.Time

	once   sync.Once
	inner  context.Context // with the timer, once Done was called
	cancel context.CancelFunc
	mu     sync.Mutex
	ended  bool // cancel was called
}

// detachedTimeout returns ctx detached from its cancellation, with a deadline d from now; its
// stop method is the cancel function.
func detachedTimeout(ctx context.Context, d time.Duration) *lazyDeadline {
	return &lazyDeadline{Context: context.WithoutCancel(ctx), deadline: time.Now().Add(d)}
}

func (c *lazyDeadline) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *lazyDeadline) Done() <-chan struct{} {
	c.once.Do(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.inner, c.cancel = context.WithDeadline(c.Context, c.deadline)
		if c.ended {
			c.cancel()
		}
	})
	return c.inner.Done()
}

func (c *lazyDeadline) Err() error {
	c.mu.Lock()
	inner, ended := c.inner, c.ended
	c.mu.Unlock()
	switch {
	case inner != nil:
		return inner.Err()
	case ended:
		return context.Canceled
	case !time.Now().Before(c.deadline):
		return context.DeadlineExceeded
	}
	return nil
}

// stop is the cancel function: it ends the context, and stops the timer if one was made.
func (c *lazyDeadline) stop() {
	c.mu.Lock()
	c.ended = true
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}
