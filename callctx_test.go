package idem

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type ctxTestKey struct{}

// The call's contexts behave as context.WithValue and context.WithoutCancel of the caller's.
func TestCallContexts(t *testing.T) {
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), ctxTestKey{}, "v"))
	deadline := time.Now().Add(time.Hour)
	parent, cancelDeadline := context.WithDeadline(parent, deadline)
	defer cancelDeadline()
	cl := &call{}
	bound := cl.bind(parent)
	detached := cl.detached()

	assert.Same(t, cl, callFrom(bound))
	assert.Same(t, cl, callFrom(detached))
	assert.Equal(t, "v", bound.Value(ctxTestKey{}))
	assert.Equal(t, "v", detached.Value(ctxTestKey{}))
	d, ok := bound.Deadline()
	assert.True(t, ok)
	assert.Equal(t, deadline, d)
	_, ok = detached.Deadline()
	assert.False(t, ok)
	assert.Nil(t, detached.Done())

	// A context derived from the bound one is a child of the caller's: no goroutine watches it.
	// Counted over many children, since tests running in parallel start goroutines of their
	// own: a watcher per child would add a thousand.
	goroutines := runtime.NumGoroutine()
	for range 1000 {
		_, cancelMore := context.WithTimeout(bound, time.Hour)
		defer cancelMore()
	}
	assert.Less(t, runtime.NumGoroutine()-goroutines, 500, "goroutines started by 1000 derived contexts")
	child, cancelChild := context.WithTimeout(bound, time.Hour)
	defer cancelChild()
	fromDetached, cancelDetached := context.WithCancel(detached)
	defer cancelDetached()

	cancel()
	select {
	case <-child.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a context derived from the call's was not cancelled with the caller's")
	}
	require.ErrorIs(t, bound.Err(), context.Canceled)
	require.ErrorIs(t, child.Err(), context.Canceled)
	assert.NoError(t, detached.Err())
	assert.NoError(t, fromDetached.Err())
	assert.Equal(t, "v", fromDetached.Value(ctxTestKey{}))
	assert.NoError(t, context.Cause(detached), "a store sees no cause on the detached context")

	// Binding the bound context again keeps the caller's as its parent.
	assert.Same(t, bound, cl.bind(bound))
	assert.Equal(t, "v", bound.Value(ctxTestKey{}))
	assert.Equal(t, "v", detached.Value(ctxTestKey{}))
}
