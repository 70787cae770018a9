package boltstore

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
)

// A ClaimExpired of 100 records is cut after minClaimsPerCommit claims when a caller waits,
// and the waiting caller's write runs next. If that write releases a record older than every
// orphan, a ClaimExpired that went on claiming in a second commit would return it after 32
// newer ones (not oldest first, not the 100 oldest at any instant). A cut ClaimExpired
// returns what its one commit took; the next call returns the released record first.
func TestCutClaimExpiredStaysOldestFirst(t *testing.T) {
	s := openInternal(t)
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	now := t0.Add(time.Hour)
	// R, the oldest, is held by x with a live lease; k001..k100 are orphans.
	r := indexRecord("R", t0, "x", now.Add(time.Hour))
	r.Fence = 1
	if err := s.Create(ictx, r); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 100; i++ {
		if err := s.Create(ictx, indexRecord(fmt.Sprintf("k%03d", i), t0.Add(time.Duration(i)*time.Second), "", time.Time{})); err != nil {
			t.Fatal(err)
		}
	}
	// After the first claim commit, x gives R up: its Release waits for a commit while
	// ClaimExpired is between its commits (the caller whose wait cut the claim commit).
	settle := s.commit.done
	var once sync.Once
	var wg sync.WaitGroup
	var relErr error
	s.commit.done = func(batch []*op) {
		for _, o := range batch {
			if o.background {
				once.Do(func() {
					wg.Go(func() { relErr = s.Release(ictx, "", "R", "x", 1) })
					waitQueued(t, s, 1)
				})
			}
		}
		settle(batch)
	}
	s.commit.live.Store(1) // a caller waits behind the first claim commit: it is cut
	got, err := s.ClaimExpired(ictx, keystore.Lease{Owner: "me", Now: now, Until: now.Add(time.Minute)}, 100)
	wg.Wait()
	if err != nil || relErr != nil {
		t.Fatal(err, relErr)
	}
	if len(got) < minClaimsPerCommit || len(got) >= 100 {
		t.Fatalf("claimed %d, want a cut batch: at least %d, fewer than 100", len(got), minClaimsPerCommit)
	}
	for i, r := range got {
		if want := fmt.Sprintf("k%03d", i+1); r.Key != want {
			t.Fatalf("claim %d is %s, want %s (oldest first)", i, r.Key, want)
		}
	}
	next, err := s.ClaimExpired(ictx, keystore.Lease{Owner: "me", Now: now, Until: now.Add(time.Minute)}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(next) != 100-len(got)+1 || next[0].Key != "R" {
		t.Fatalf("next claim: %d records, first %v; want R (released, the oldest) and the %d left", len(next), next[0].Key, 100-len(got))
	}
}
