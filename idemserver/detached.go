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
// same context either way. Value lookups go to the parent through context.WithoutCancel, made
// only when a value is asked for (that hides the parent's cancellation from context.Cause), and
// to the timer's context once it exists. Its zero value is not ready: start it first.
type lazyDeadline struct {
	parent   context.Context // the request's context: its values, never its cancellation
	deadline time.Time

	once   sync.Once
	mu     sync.Mutex
	inner  context.Context // with the timer, once Done was called
	cancel context.CancelFunc
	ended  bool // cancel was called
}

// detachedTimeout returns ctx detached from its cancellation, with a deadline d from now; its
// stop method is the cancel function.
func detachedTimeout(ctx context.Context, d time.Duration) *lazyDeadline {
	c := &lazyDeadline{}
	c.start(ctx, d)
	return c
}

// start makes c, in place, what detachedTimeout returns: the middleware keeps one in each
// request's execution, so that storing the answer allocates no context.
func (c *lazyDeadline) start(ctx context.Context, d time.Duration) {
	c.parent, c.deadline = ctx, time.Now().Add(d)
}

func (c *lazyDeadline) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *lazyDeadline) Done() <-chan struct{} {
	c.once.Do(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.inner, c.cancel = context.WithDeadline(context.WithoutCancel(c.parent), c.deadline)
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

// Value returns the timer's context's value once Done made it (so that a context derived
// from c finds c's cancellation there, as from context.WithTimeout's), and the detached
// parent's until then.
func (c *lazyDeadline) Value(key any) any {
	c.mu.Lock()
	inner := c.inner
	c.mu.Unlock()
	if inner != nil {
		return inner.Value(key)
	}
	return context.WithoutCancel(c.parent).Value(key)
}

// String names the context as context.WithTimeout's do, for debugging output.
func (c *lazyDeadline) String() string {
	return "idemserver.detachedTimeout(" + c.deadline.String() + ")"
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
