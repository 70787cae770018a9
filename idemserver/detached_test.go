package idemserver

import (
	"context"
	"errors"
	"testing"
	"time"
)

type detachedKey struct{}

// TestDetachedTimeout holds lazyDeadline to context.WithTimeout(context.WithoutCancel(...)):
// values pass, the parent's cancellation does not, the deadline ends it whether or not Done
// was asked for before, and stop cancels it, before or after Done.
func TestDetachedTimeout(t *testing.T) {
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), detachedKey{}, "v"))
	cancelParent()

	c := detachedTimeout(parent, time.Hour)
	if c.Value(detachedKey{}) != "v" || c.Err() != nil {
		t.Fatalf("Value %v, Err %v: want the parent's value, no error", c.Value(detachedKey{}), c.Err())
	}
	if d, ok := c.Deadline(); !ok || time.Until(d) < 59*time.Minute {
		t.Fatalf("Deadline %v %v", d, ok)
	}
	if context.Cause(c) != nil {
		t.Fatalf("Cause %v: the parent's cancellation must not show", context.Cause(c))
	}
	select {
	case <-c.Done():
		t.Fatal("done before its deadline, with its parent cancelled")
	default:
	}
	c.stop()
	<-c.Done()
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("after stop: %v", c.Err())
	}

	stopped := detachedTimeout(parent, time.Hour)
	stopped.stop() // before anything waited on it
	if !errors.Is(stopped.Err(), context.Canceled) {
		t.Fatalf("stopped before Done: Err %v", stopped.Err())
	}
	<-stopped.Done()

	short := detachedTimeout(parent, 20*time.Millisecond)
	time.Sleep(30 * time.Millisecond) // a real timer: the deadline is the clock's
	if !errors.Is(short.Err(), context.DeadlineExceeded) {
		t.Fatalf("past its deadline, before Done: Err %v", short.Err())
	}
	<-short.Done()
	if !errors.Is(short.Err(), context.DeadlineExceeded) {
		t.Fatalf("past its deadline, after Done: Err %v", short.Err())
	}

	waiting := detachedTimeout(parent, 20*time.Millisecond)
	select {
	case <-waiting.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done never closed at the deadline")
	}
	short.stop()
	waiting.stop()
}

// TestDetachedTimeoutDerived: a context derived from lazyDeadline ends with it, whether it
// was derived before or after Done made the timer, and values still pass through after
// Done.
func TestDetachedTimeoutDerived(t *testing.T) {
	parent := context.WithValue(context.Background(), detachedKey{}, "v")
	for _, doneFirst := range []bool{false, true} {
		c := detachedTimeout(parent, time.Hour)
		if doneFirst {
			_ = c.Done()
		}
		child, cancel := context.WithCancel(c)
		if child.Value(detachedKey{}) != "v" || c.Value(detachedKey{}) != "v" {
			t.Fatalf("Done first %v: the parent's value is lost", doneFirst)
		}
		c.stop()
		select {
		case <-child.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("Done first %v: the derived context outlived stop", doneFirst)
		}
		if !errors.Is(child.Err(), context.Canceled) || !errors.Is(context.Cause(c), context.Canceled) {
			t.Fatalf("Done first %v: child %v, cause %v", doneFirst, child.Err(), context.Cause(c))
		}
		cancel()
	}
}
