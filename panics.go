package idem

import (
	"fmt"
	"runtime/debug"
	"sync/atomic"
)

// panicGuard keeps the first panic of code it runs on goroutines of idem's own (Recover's
// workers, the background reclaimer, the lease renewer), where the application's code (a
// KeyStatusFunc, a hook, a classifier, a store) would otherwise end the process whatever the
// caller defers. Recover raises it again on the caller's goroutine; the background loops
// log it.
type panicGuard struct{ first atomic.Pointer[caughtPanic] }

// caughtPanic is a recovered panic value and where it happened.
type caughtPanic struct {
	value any
	stack []byte
}

// run calls f, keeping its panic, if any, and the first only.
func (g *panicGuard) run(f func()) {
	defer func() {
		if p := recover(); p != nil {
			g.first.CompareAndSwap(nil, &caughtPanic{p, debug.Stack()})
		}
	}()
	f()
}

// raise panics again with the first value kept, on the calling goroutine.
func (g *panicGuard) raise() {
	if p := g.first.Load(); p != nil {
		panic(p.value)
	}
}

// err is the first panic kept as an error with its stack, for a log; nil if none.
func (g *panicGuard) err() error {
	if p := g.first.Load(); p != nil {
		return fmt.Errorf("panic: %v\n%s", p.value, p.stack)
	}
	return nil
}
