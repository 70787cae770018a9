package boltstore

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
)

// A background write queued before a live one gives way: the live write is committed first,
// in a commit of its own, then the background write in the next; a deferred write queued
// before the background one is not held back.
func TestBackgroundGivesWayToLiveWriter(t *testing.T) {
	s := openInternal(t)
	release := holdLeader(t, s)
	var mu sync.Mutex
	var order []string // op names, with the txid that applied them
	rec := func(name string) func(tx *bbolt.Tx) error {
		return func(tx *bbolt.Tx) error {
			mu.Lock()
			order = append(order, fmt.Sprintf("%s@%d", name, tx.ID()))
			mu.Unlock()
			return put(name, new(atomic.Int64))(tx)
		}
	}
	// A deferred op first, then the background one, then a live one.
	s.commit.mu.Lock()
	s.commit.queue = append(s.commit.queue, &op{deferred: true, apply: rec("deferred")})
	s.commit.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() { errs[0] = s.commit.doBackground(ictx, rec("background")) })
	waitQueued(t, s, 2)
	wg.Go(func() { errs[1] = s.commit.do(ictx, rec("live")) })
	waitQueued(t, s, 3)
	if !s.commit.callsWaiting() {
		t.Fatal("callsWaiting false with a live writer queued")
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
	}
	var first int
	if _, err := fmt.Sscanf(order[0][len("deferred@"):], "%d", &first); err != nil {
		t.Fatalf("%v: %v", order, err)
	}
	want := []string{fmt.Sprintf("deferred@%d", first), fmt.Sprintf("live@%d", first), fmt.Sprintf("background@%d", first+1)}
	if !slices.Equal(order, want) {
		t.Fatalf("applied %v, want %v", order, want)
	}
	if s.commit.callsWaiting() {
		t.Fatal("callsWaiting true with nothing queued")
	}
}

// A background op is passed over by at most maxBackgroundPasses commits with live writers,
// then committed with the next.
func TestBackgroundPassedOverAtMost(t *testing.T) {
	c := &committer{}
	bg := &op{background: true}
	c.queue = []*op{bg}
	for i := 1; i <= maxBackgroundPasses+1; i++ {
		live := &op{}
		c.queue = append(c.queue, live)
		c.live.Add(1)
		batch := c.takeLocked(live)
		if c.live.Load() != 0 || !c.batchLive.Load() {
			t.Fatalf("commit %d: live %d, batchLive %v; want 0, true", i, c.live.Load(), c.batchLive.Load())
		}
		if i <= maxBackgroundPasses {
			if !slices.Equal(batch, []*op{live}) || !slices.Equal(c.queue, []*op{bg}) {
				t.Fatalf("commit %d: batch of %d, queue of %d; want the live op, then the background op left", i, len(batch), len(c.queue))
			}
			continue
		}
		if !slices.Equal(batch, []*op{bg, live}) || len(c.queue) != 0 {
			t.Fatalf("commit %d: batch of %d, queue of %d; want both ops committed", i, len(batch), len(c.queue))
		}
	}
}

// With no live writer, the background op leads and takes everything queued.
func TestBackgroundAloneTakesAll(t *testing.T) {
	c := &committer{}
	bg, d := &op{background: true}, &op{deferred: true}
	c.queue = []*op{d, bg}
	if batch := c.takeLocked(bg); !slices.Equal(batch, []*op{d, bg}) || len(c.queue) != 0 || c.batchLive.Load() {
		t.Fatalf("batch %v, queue %v, batchLive %v", batch, c.queue, c.batchLive.Load())
	}
}

// A claim commit that a live writer waits for stops at minClaimsPerCommit claims, the oldest
// by (CreatedAt, Key) even where CreatedAt ties across the cut, and ClaimExpired returns
// them (fewer than its limit); a second call claims the rest: the same records, oldest first,
// as without the writer.
func TestClaimExpiredStopsForWaitingWriter(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	now := t0.Add(time.Hour)
	l := keystore.Lease{Owner: "me", Now: now, Until: now.Add(time.Minute)}
	const n = 3 * minClaimsPerCommit
	setup := func(t *testing.T) *Store {
		s, err := Open(filepath.Join(t.TempDir(), "keys.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		for i := range n {
			created := t0.Add(time.Duration(i) * time.Second)
			if i == minClaimsPerCommit { // ties with the last record of a cut batch
				created = t0.Add(time.Duration(i-1) * time.Second)
			}
			if err := s.Create(ictx, indexRecord(fmt.Sprintf("k%03d", i), created, "", time.Time{})); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}

	s := setup(t)
	yes := func() bool { return true }
	got := claimWithYield(t, s, l, n, yes)
	if len(got) != minClaimsPerCommit {
		t.Fatalf("a commit with a writer waiting claimed %d, want %d", len(got), minClaimsPerCommit)
	}
	for i, r := range got {
		if want := fmt.Sprintf("k%03d", i); r.Key != want {
			t.Fatalf("claim %d is %s, want %s", i, r.Key, want)
		}
	}
	checkIndex(t, s)

	// End to end: a live writer is in the first claim commit's batch.
	s = setup(t)
	before := s.commit.commits.Load()
	s.commit.live.Store(1) // taken with the first batch, as a writer queued before it
	first, err := s.ClaimExpired(ictx, l, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) < minClaimsPerCommit || len(first) >= n {
		t.Fatalf("a cut ClaimExpired returned %d, want at least %d and fewer than %d", len(first), minClaimsPerCommit, n)
	}
	if c := s.commit.commits.Load() - before; c != 1 {
		t.Fatalf("%d commits, want 1 (cut short, then returned)", c)
	}
	rest, err := s.ClaimExpired(ictx, l, n)
	if err != nil {
		t.Fatal(err)
	}
	all := append(first, rest...)
	if len(all) != n {
		t.Fatalf("claimed %d in two calls, want %d", len(all), n)
	}
	for i, r := range all {
		if want := fmt.Sprintf("k%03d", i); r.Key != want || r.Owner != "me" {
			t.Fatalf("claim %d is %s (owner %q), want %s", i, r.Key, r.Owner, want)
		}
	}
	if more, err := s.ClaimExpired(ictx, l, n); err != nil || len(more) != 0 {
		t.Fatalf("claimed again %d, %v; want none", len(more), err)
	}
	checkIndex(t, s)
}

// claimWithYield runs one commit of ClaimExpired's claim with yield.
func claimWithYield(t *testing.T, s *Store, l keystore.Lease, n int, yield func() bool) []*keystore.Record {
	t.Helper()
	var got []*keystore.Record
	var cut bool
	if err := s.commit.do(context.Background(), func(tx *bbolt.Tx) error {
		var err error
		got, cut, err = s.claimOrphans(tx, l, n, nil, yield)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !cut {
		t.Fatal("not cut short")
	}
	return got
}
