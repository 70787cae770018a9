package idem

import (
	"context"
	"time"
)

// A call's two derived contexts live inside the call: context.WithValue and
// context.WithoutCancel would each cost an allocation on every Do.

// callCtx is the caller's context carrying its call (context.WithValue(ctx, callKey{}, cl)):
// the client's one retrier and transport find the call through it. Done, Err and Deadline
// are the caller's; so is every other value, the cancelCtx lookup of package context
// included, so a context derived from it is cancelled with the caller's as usual.
type callCtx struct {
	context.Context
	cl *call
}

func (c *callCtx) Value(key any) any {
	if key == (callKey{}) {
		return c.cl
	}
	return c.Context.Value(key)
}

// detachedCtx is context.WithoutCancel of the call's context: the store writes that must
// happen even after the caller gave up are made with it. A struct of one pointer, it needs
// no allocation to become a context.Context. Unlike WithoutCancel it does not hide the
// caller's cancelCtx from package context's internal lookup; that is harmless because the
// package asks for it only where Done is not nil (propagateCancel) or Err is not nil (Cause),
// and here both are nil. TestCallContexts checks what a store can observe.
type detachedCtx struct{ cl *call }

func (detachedCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (detachedCtx) Done() <-chan struct{}       { return nil }
func (detachedCtx) Err() error                  { return nil }
func (d detachedCtx) Value(key any) any {
	if d.cl.bound.Context == nil { // not bound yet: nothing to look up
		return nil
	}
	return d.cl.bound.Value(key)
}
func (detachedCtx) String() string { return "idem.detachedCtx" }

// bind makes ctx the call's context and returns it carrying the call. run calls it first,
// before anything derives from the call's context. Binding the bound context again changes
// nothing (it must never become its own parent).
func (cl *call) bind(ctx context.Context) context.Context {
	if ctx != context.Context(&cl.bound) {
		cl.bound = callCtx{Context: ctx, cl: cl}
	}
	return &cl.bound
}

// detached is the call's context without its cancellation (context.WithoutCancel).
func (cl *call) detached() context.Context { return detachedCtx{cl} }
