package boltstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
)

// Internal tests of group commit: they drive the committer with hand-made ops and hold the
// leader inside its transaction so that the batching is deterministic.

var testBucket = []byte("test")

func openInternal(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "keys.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// put is an op that writes key into the test bucket and counts its runs.
func put(key string, runs *atomic.Int64) func(tx *bbolt.Tx) error {
	return func(tx *bbolt.Tx) error {
		runs.Add(1)
		b, err := tx.CreateBucketIfNotExists(testBucket)
		if err != nil {
			return abort(err)
		}
		if b.Get([]byte(key)) != nil {
			return keystore.ErrExists
		}
		if err := b.Put([]byte(key), []byte("v")); err != nil {
			return abort(err)
		}
		return nil
	}
}

func has(t *testing.T, s *Store, key string) bool {
	t.Helper()
	found := false
	if err := s.db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket(testBucket)
		found = b != nil && b.Get([]byte(key)) != nil
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return found
}

// holdLeader starts a write whose transaction blocks until release is called; it returns
// once that write is committing, so every later op queues behind it.
func holdLeader(t *testing.T, s *Store) (release func() error) {
	t.Helper()
	started, gate := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.commit.do(context.Background(), func(tx *bbolt.Tx) error {
			close(started)
			<-gate
			return put("leader", new(atomic.Int64))(tx)
		})
	}()
	<-started
	return func() error { close(gate); return <-done }
}

// waitQueued waits until n ops are queued behind the running commit.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		s.commit.mu.Lock()
		q := len(s.commit.queue)
		s.commit.mu.Unlock()
		if q == n {
			return
		}
	}
	t.Fatalf("%d ops never queued", n)
}

func TestLoneWriterOneCommit(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	rec := &keystore.Record{Key: "k", Intent: "i", State: keystore.StatePending, Request: keystore.Request{Method: "POST"}}
	steps := []struct {
		name string
		fn   func() error
		want error
	}{
		{"Create", func() error { return s.Create(ctx, rec) }, nil},
		{"Update", func() error { return s.Update(ctx, rec) }, nil},
		{"Create duplicate", func() error { return s.Create(ctx, rec) }, keystore.ErrExists},
		{"Purge", func() error { _, err := s.Purge(ctx, time.Now()); return err }, nil},
	}
	txid := func() (id int) {
		_ = s.db.View(func(tx *bbolt.Tx) error { id = tx.ID(); return nil })
		return id
	}
	for _, st := range steps {
		before, beforeID := s.commit.commits.Load(), txid()
		if err := st.fn(); !errors.Is(err, st.want) {
			t.Fatalf("%s: %v, want %v", st.name, err, st.want)
		}
		if n := s.commit.commits.Load() - before; n != 1 {
			t.Fatalf("%s ran %d transactions, want 1", st.name, n)
		}
		wantID := beforeID + 1
		if st.want != nil {
			wantID = beforeID // a refused write is rolled back: no commit, no fsync
		}
		if id := txid(); id != wantID {
			t.Fatalf("%s: committed txid %d, want %d", st.name, id, wantID)
		}
	}
}

func TestWritersQueuedDuringCommitShareTheNext(t *testing.T) {
	s := openInternal(t)
	release := holdLeader(t, s)
	const n = 63
	var wg sync.WaitGroup
	runs := make([]atomic.Int64, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = s.commit.do(context.Background(), put(fmt.Sprint(i), &runs[i])) })
	}
	waitQueued(t, s, n)
	if err := release(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if c := s.commit.commits.Load(); c != 2 {
		t.Fatalf("%d transactions for 1 + %d queued writes, want 2", c, n)
	}
	for i := range n {
		if errs[i] != nil || runs[i].Load() != 1 || !has(t, s, fmt.Sprint(i)) {
			t.Fatalf("op %d: err %v, ran %d times, stored %v", i, errs[i], runs[i].Load(), has(t, s, fmt.Sprint(i)))
		}
	}
}

func TestLogicalErrorFailsOnlyItsOp(t *testing.T) {
	s := openInternal(t)
	release := holdLeader(t, s)
	var runs atomic.Int64
	errs := make(chan error, 2)
	go func() { errs <- s.commit.do(context.Background(), put("leader", &runs)) }() // exists by then
	waitQueued(t, s, 1)
	go func() { errs <- s.commit.do(context.Background(), put("other", &runs)) }()
	waitQueued(t, s, 2)
	if err := release(); err != nil {
		t.Fatal(err)
	}
	got := []error{<-errs, <-errs}
	if !(errors.Is(got[0], keystore.ErrExists) && got[1] == nil) && !(errors.Is(got[1], keystore.ErrExists) && got[0] == nil) {
		t.Fatalf("results %v, want one ErrExists and one nil", got)
	}
	if !has(t, s, "other") {
		t.Fatal("the write beside a logical error was lost")
	}
}

func TestAbortFailsTheWholeBatch(t *testing.T) {
	s := openInternal(t)
	release := holdLeader(t, s)
	boom := errors.New("boom")
	errs := make(chan error, 2)
	go func() { errs <- s.commit.do(context.Background(), put("x", new(atomic.Int64))) }()
	waitQueued(t, s, 1)
	go func() {
		errs <- s.commit.do(context.Background(), func(*bbolt.Tx) error { return abort(boom) })
	}()
	waitQueued(t, s, 2)
	if err := release(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; !errors.Is(err, boom) {
			t.Fatalf("op in an aborted batch: %v, want boom", err)
		}
	}
	if has(t, s, "x") {
		t.Fatal("a write of an aborted batch was committed")
	}
}

func TestCancelWhileQueued(t *testing.T) {
	s := openInternal(t)
	release := holdLeader(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	var qRuns, rRuns atomic.Int64
	qErr, rErr := make(chan error, 1), make(chan error, 1)
	go func() { qErr <- s.commit.do(ctx, put("q", &qRuns)) }() // first in queue: next leader
	waitQueued(t, s, 1)
	go func() { rErr <- s.commit.do(context.Background(), put("r", &rRuns)) }()
	waitQueued(t, s, 2)
	cancel()
	if err := <-qErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled queued op: %v", err)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if err := <-rErr; err != nil {
		t.Fatalf("op queued behind a cancelled leader: %v", err)
	}
	if qRuns.Load() != 0 || has(t, s, "q") || !has(t, s, "r") {
		t.Fatalf("cancelled op ran %d times (stored %v); other stored %v", qRuns.Load(), has(t, s, "q"), has(t, s, "r"))
	}
}

func TestCloseWaitsForQueuedWrites(t *testing.T) {
	s := openInternal(t)
	release := holdLeader(t, s)
	errs := make(chan error, 5)
	for i := range 5 {
		go func() { errs <- s.commit.do(context.Background(), put(fmt.Sprint(i), new(atomic.Int64))) }()
	}
	waitQueued(t, s, 5)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned %v while writes were queued", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := <-errs; err != nil {
			t.Fatalf("queued write: %v", err)
		}
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := s.commit.do(context.Background(), put("late", new(atomic.Int64))); !errors.Is(err, keystore.ErrClosed) {
		t.Fatalf("write after Close: %v", err)
	}
}

// A panic in a commit (bbolt on a damaged page, or an op) fails every op of the batch with
// ErrCorrupt, the panicking one included, instead of crashing; later writes are refused.
func TestPanicInCommitReleasesWaiters(t *testing.T) {
	s := openInternal(t)
	release := holdLeader(t, s)
	errs := make(chan error, 2)
	go func() {
		errs <- s.commit.do(context.Background(), func(*bbolt.Tx) error { panic("bad page") })
	}()
	waitQueued(t, s, 1)
	go func() { errs <- s.commit.do(context.Background(), put("y", new(atomic.Int64))) }()
	waitQueued(t, s, 2)
	if err := release(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		err := <-errs
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "bad page") {
			t.Fatalf("op in a panicked batch: %v, want ErrCorrupt naming the panic", err)
		}
	}
	if has(t, s, "y") {
		t.Fatal("a write of the panicked batch was committed")
	}
	// A panic means damaged pages: later writes are refused rather than spread the damage.
	if err := s.commit.do(context.Background(), put("z", new(atomic.Int64))); !errors.Is(err, ErrCorrupt) || has(t, s, "z") {
		t.Fatalf("write after a panicked commit: %v, want ErrCorrupt", err)
	}
}

// A panic in bbolt's commit makes it roll back in a deferred call that rereads the freelist
// page; when that page is damaged too, the rollback panics in turn and leaves bbolt's write
// lock held. update must release it: later writes and Close return instead of waiting forever.
func TestFailedRollbackReleasesWriteLock(t *testing.T) {
	// Without SyncFreelist, the rollback rescans the file on a goroutine of bbolt's, where
	// a fault cannot be recovered (see Options.SyncFreelist).
	s, err := Open(filepath.Join(t.TempDir(), "keys.db"), &Options{SyncFreelist: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for i := range 20 {
		if err := s.commit.do(context.Background(), put(fmt.Sprint(i), new(atomic.Int64))); err != nil {
			t.Fatal(err)
		}
	}
	path := s.db.Path()
	err = update(s.db, "test", func(tx *bbolt.Tx) error {
		if err := tx.Bucket(testBucket).Put([]byte("1"), []byte("w")); err != nil {
			return err
		}
		// Under the commit: every page but the meta pages reads as zeros.
		return os.Truncate(path, 2*int64(s.db.Info().PageSize))
	})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("update: %v, want ErrCorrupt", err)
	}
	t.Log(err)
	done := make(chan error, 1)
	go func() {
		err := s.commit.do(context.Background(), put("after", new(atomic.Int64)))
		if cerr := s.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Log(err)
	case <-time.After(10 * time.Second):
		// Not t.Fatal: the cleanup's Close would wait for the stuck write forever.
		panic("write or Close after a failed rollback hung")
	}
}
