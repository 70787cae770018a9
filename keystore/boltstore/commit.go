package boltstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
)

// committer runs group commit without a timer. A writer queues its op; if no commit is
// running it becomes the leader: it takes every queued op and applies them in queue order in
// one bbolt Update (one commit, one pair of fsyncs). Ops queued meanwhile wait; when the commit
// ends, the leader hands leadership to the first of them, which commits everything queued by
// then, and wakes the ops it committed. A lone writer therefore pays exactly one Update, and
// no one ever waits for a timer. Unlike bbolt's DB.Batch, each op runs exactly once.
type committer struct {
	db      *bbolt.DB
	mu      sync.Mutex
	idle    sync.Cond // signalled when running becomes false
	queue   []*op     // waiting for the next commit, in arrival order
	running bool      // a leader exists: committing, or designated and about to
	closed  bool
	commits atomic.Uint64 // bbolt Update transactions run, for tests

	// Deferred writes (see deferred.go): they wait in queue like other ops but never lead;
	// the next leader commits them, or a flush armed for flushDelay does.
	flushDelay time.Duration
	flushArmed bool
	done       func(batch []*op) // called after each commit, before the ops are woken

	// damage is the first structural damage found by a read or a write (see structuralError).
	// Once it is set, every write fails with it, so that the damage does not spread.
	damage atomic.Pointer[structuralError]

	// cursors serves the point lookups of the commit under way (txcursor.go).
	cursors txCursors

	// watch checks after every commit that the file is still the one at its path (nil for a
	// read-only store).
	watch *fileWatch
}

// op is one write. apply runs inside the shared transaction and returns the op's own result:
// a logical error (ErrExists, ErrNotFound, ErrInvalid, ErrCorrupt) must be decided before the
// op writes anything, so that it fails alone; an error wrapped by abort rolls back the whole
// batch, and every op in it then fails with that error.
type op struct {
	apply func(tx *bbolt.Tx) error
	err   error
	lead  bool          // set under committer.mu: the caller must run the next commit
	wake  chan struct{} // one slot: "lead" or "done"; never two unread signals

	deferred bool   // no caller waits for it (UpdateDeferred)
	key      []byte // records bucket key of a deferred op
}

// errNothingWritten rolls back a batch in which every op failed with a logical error.
var errNothingWritten = errors.New("boltstore: nothing written")

// abortError makes apply abort the batch's transaction.
type abortError struct{ err error }

func (e *abortError) Error() string { return e.err.Error() }
func (e *abortError) Unwrap() error { return e.err }

// abort wraps err, an unexpected bbolt error, so that the batch is rolled back.
func abort(err error) error { return &abortError{err} }

func (c *committer) init(db *bbolt.DB) {
	c.db = db
	c.idle.L = &c.mu
}

// do runs apply in a commit and returns its result once that commit is durable. ctx is
// honoured until a leader takes the op: a cancelled op still in the queue is dropped and
// returns ctx.Err(); an op already being committed completes and returns its result.
func (c *committer) do(ctx context.Context, apply func(tx *bbolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := c.refused(); err != nil {
		return err
	}
	o := &op{apply: apply, wake: make(chan struct{}, 1)}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return keystore.ErrClosed
	}
	c.queue = append(c.queue, o)
	if !c.running {
		c.running, o.lead = true, true
	}
	lead := o.lead
	c.mu.Unlock()
	if !lead {
		if !c.wait(ctx, o) {
			return ctx.Err()
		}
		if !o.lead { // committed by another leader
			return o.err
		}
	}
	c.commit()
	return o.err
}

// refused returns the error of a write once structural damage has been found, else nil.
func (c *committer) refused() error {
	if err := c.watch.err(); err != nil {
		return err
	}
	if d := c.damage.Load(); d != nil {
		return fmt.Errorf("boltstore: write refused, the keystore's pages are damaged: %w", d)
	}
	return nil
}

// note records err if it reports structural damage, so that later writes are refused, and
// returns it.
func (c *committer) note(err error) error {
	if d, ok := errors.AsType[*structuralError](err); ok {
		c.damage.CompareAndSwap(nil, d)
	}
	return err
}

// wait blocks until o is done or must lead. It returns false if ctx ended first and o was
// withdrawn from the queue before any leader took it.
func (c *committer) wait(ctx context.Context, o *op) bool {
	select {
	case <-o.wake:
		return true
	case <-ctx.Done():
	}
	c.mu.Lock()
	if i := slices.Index(c.queue, o); i >= 0 {
		c.queue = slices.Delete(c.queue, i, i+1)
		if o.lead { // designated but not started: pass it on
			c.handoffLocked()
		}
		c.mu.Unlock()
		return false
	}
	c.mu.Unlock()
	<-o.wake // taken by a leader: the commit is under way
	return true
}

// commit runs one commit for everything queued, then hands leadership on and wakes the ops.
func (c *committer) commit() {
	c.mu.Lock()
	batch := c.queue
	c.queue = nil
	c.mu.Unlock()
	// However the commit ends, even by a panic that guard did not expect to recover, the ops
	// are woken and leadership is handed on: a waiter never hangs.
	finished := false
	defer func() {
		if !finished {
			for _, o := range batch {
				o.err = fmt.Errorf("%w: commit of %d writes did not complete", ErrCorrupt, len(batch))
			}
			c.finish(batch)
		}
	}()
	if err := c.refused(); err != nil { // found since these ops were queued
		for _, o := range batch {
			o.err = err
		}
		finished = true
		c.finish(batch)
		return
	}
	c.commits.Add(1)
	// A damaged page makes bbolt (or an op decoding a record) panic or fault: update returns
	// that as ErrCorrupt and rolls the transaction back, so nothing of the batch is written and
	// every op in it fails with that error. So does an op that finds structural damage.
	err := update(c.db, "commit", func(tx *bbolt.Tx) error {
		wrote := false
		for _, o := range batch {
			o.err = o.apply(tx)
			if a, ok := errors.AsType[*abortError](o.err); ok {
				return a.err
			}
			if _, ok := errors.AsType[*structuralError](o.err); ok { // write nothing on damaged pages
				return o.err
			}
			wrote = wrote || o.err == nil
		}
		if !wrote { // every op failed before writing: skip the fsyncs of an empty commit
			return errNothingWritten
		}
		return nil
	})
	c.cursors.release()
	if errors.Is(err, errNothingWritten) {
		err = nil
	}
	// Written to a file that is gone (deleted or replaced, before or during the commit):
	// no writer may act on it. Checked before the writers are woken.
	if gerr := c.watch.check(); gerr != nil && !errors.Is(err, keystore.ErrClosed) {
		err = gerr
	}
	if err != nil {
		err = dbError(err)
		if !errors.Is(err, keystore.ErrClosed) {
			err = fmt.Errorf("boltstore: commit of %d writes failed: %w", len(batch), err)
		}
		for _, o := range batch {
			o.err = err
		}
	}
	for _, o := range batch { // before the next leader commits
		c.note(o.err)
	}
	if c.done != nil {
		c.done(batch)
	}
	finished = true
	c.finish(batch)
}

// finish wakes the ops of the batch just committed, then hands leadership to the next queued
// op (or marks the committer idle). The next leader is woken last on purpose: the Go
// scheduler runs the goroutine readied last first (each wake takes the processor's "run
// next" slot from the one before), so woken first it would wait behind every caller of the
// batch, each running its call on to its next block, while the commit pipeline idles. An op
// a woken caller queues meanwhile finds a leader still running and waits for the handoff.
func (c *committer) finish(batch []*op) {
	for _, o := range batch {
		if !o.deferred {
			o.wake <- struct{}{}
		}
	}
	c.mu.Lock()
	c.handoffLocked()
	c.mu.Unlock()
}

// handoffLocked designates the first queued op as the next leader, or marks the committer
// idle if the queue is empty. c.mu is held.
func (c *committer) handoffLocked() {
	for _, next := range c.queue {
		if !next.deferred { // the leader commits the deferred ops queued before it too
			next.lead = true
			next.wake <- struct{}{}
			return
		}
	}
	c.running = false
	c.idle.Broadcast()
	if len(c.queue) > 0 { // deferred ops only: a flush commits them
		c.armFlushLocked()
	}
}

// close refuses new ops and waits until the queued ones are committed. It returns false if
// the committer was already closed.
func (c *committer) close() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.closed = true
	for c.running {
		c.idle.Wait()
	}
	if len(c.queue) > 0 { // deferred writes: commit them before the file closes
		c.running = true
		c.mu.Unlock()
		c.commit()
		c.mu.Lock()
		for c.running {
			c.idle.Wait()
		}
	}
	return true
}
