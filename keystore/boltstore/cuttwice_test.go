package boltstore

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
)

// A ClaimExpired of 100 records cut after its first commit (a caller waits). A record claimed
// by that commit that a caller of the same owner (a Do of this instance, which Claim lets
// take a record its owner holds) claims and releases right after must not come back in the
// same result under a second fence: a cut ClaimExpired returns what its one commit took.
func TestCutClaimExpiredReturnsEachKeyOnce(t *testing.T) {
	s := openInternal(t)
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	now := t0.Add(time.Hour)
	for i := 1; i <= 100; i++ {
		if err := s.Create(ictx, indexRecord(fmt.Sprintf("k%03d", i), t0.Add(time.Duration(i)*time.Second), "", time.Time{})); err != nil {
			t.Fatal(err)
		}
	}
	l := keystore.Lease{Owner: "me", Now: now, Until: now.Add(time.Minute)}
	settle := s.commit.done
	var wg sync.WaitGroup
	var claimErr, releaseErr error
	stage := 0 // hook runs on the committing goroutine, one commit at a time
	queuedLive := func() {
		for s.commit.live.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	s.commit.done = func(batch []*op) {
		switch stage {
		case 0: // after the first claim commit: a call of the same owner takes k001 ...
			for _, o := range batch {
				if o.background {
					stage = 1
					wg.Go(func() { _, claimErr = s.Claim(ictx, "", "k001", l) })
					queuedLive()
				}
			}
		case 1: // ... and, once its claim (fence 2) is committed, gives it up
			stage = 2
			wg.Go(func() { releaseErr = s.Release(ictx, "", "k001", "me", 2) })
			queuedLive()
		}
		settle(batch)
	}
	s.commit.live.Store(1) // a caller waits behind the first claim commit: it is cut
	got, err := s.ClaimExpired(ictx, l, 100)
	wg.Wait()
	if err != nil || claimErr != nil || releaseErr != nil {
		t.Fatal(err, claimErr, releaseErr)
	}
	seen := map[string]int64{}
	for _, r := range got {
		if f, dup := seen[r.Key]; dup {
			t.Fatalf("%s returned twice by one ClaimExpired (fences %d and %d)", r.Key, f, r.Fence)
		}
		seen[r.Key] = r.Fence
	}
}
