package keystoretest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
)

// handle returns a for even i and b for odd i: racers alternate between the two instances.
func handle(i int, a, b keystore.Store) keystore.Store {
	if i%2 == 0 {
		return a
	}
	return b
}

// testConcurrentClaim: racers with distinct owners claim one record at once; exactly one wins
// and every other gets a *ClaimedError naming the winner.
func testConcurrentClaim(t *testing.T, a, b keystore.Store) {
	mustCreate(t, a, sample("t", "k"))
	var (
		mu      sync.Mutex
		holders []string
		seen    = map[string]int{}
	)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range racers {
		wg.Go(func() {
			<-start
			owner := fmt.Sprintf("inst-%d", i)
			rec, err := handle(i, a, b).Claim(bg, "t", "k", lease(owner, t0, time.Minute))
			mu.Lock()
			defer mu.Unlock()
			var ce *keystore.ClaimedError
			switch {
			case err == nil:
				holders = append(holders, owner)
				if rec.Owner != owner || rec.Fence != 1 {
					t.Errorf("%s won with owner %q fence %d", owner, rec.Owner, rec.Fence)
				}
			case errors.As(err, &ce):
				seen[ce.Owner]++
			default:
				t.Errorf("%s: %v, want nil or *ClaimedError", owner, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(holders) != 1 {
		t.Fatalf("%d of %d concurrent Claims succeeded (%v), want 1", len(holders), racers, holders)
	}
	if seen[holders[0]] != racers-1 || len(seen) != 1 {
		t.Fatalf("refused claims named holders %v, want %d times %q", seen, racers-1, holders[0])
	}
	if got := mustGet(t, b, "t", "k"); got.Owner != holders[0] || got.Fence != 1 {
		t.Fatalf("stored lease (%q, %d), want (%q, 1)", got.Owner, got.Fence, holders[0])
	}
}

// testConcurrentClaimExpired: reclaimers on both handles drain a set of orphans at once; every
// orphan is handed to exactly one of them, and the store names that one as owner.
func testConcurrentClaimExpired(t *testing.T, a, b keystore.Store) {
	const orphans, reclaimers, batch = 150, 8, 7
	for i := range orphans {
		rec := sample(fmt.Sprintf("scope-%d", i%3), fmt.Sprintf("orphan-%03d", i))
		if i%2 == 0 { // half never claimed, half held by a dead instance
			rec.Owner, rec.LeaseUntil, rec.Fence = "dead", t0.Add(-time.Second), 1
		}
		mustCreate(t, a, rec)
	}
	var (
		mu    sync.Mutex
		owner = map[string]string{} // scope/key -> reclaimer
		dups  []string
		wg    sync.WaitGroup
	)
	start := make(chan struct{})
	for i := range reclaimers {
		wg.Go(func() {
			<-start
			me := fmt.Sprintf("reclaimer-%d", i)
			for {
				got, err := handle(i, a, b).ClaimExpired(bg, lease(me, t0, time.Minute), batch)
				if err != nil {
					t.Errorf("%s: ClaimExpired: %v", me, err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, r := range got {
					k := r.Scope + "/" + r.Key
					if prev, ok := owner[k]; ok {
						dups = append(dups, k+" to "+prev+" and "+me)
					}
					owner[k] = me
					if r.Owner != me {
						t.Errorf("%s received %s owned by %q", me, k, r.Owner)
					}
				}
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	if len(dups) != 0 {
		t.Fatalf("%d duplicate claims, the first: %v", len(dups), dups[:min(5, len(dups))])
	}
	if len(owner) != orphans {
		t.Fatalf("%d orphans claimed, want %d", len(owner), orphans)
	}
	all, err := b.List(bg, keystore.StatePending)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for _, r := range all {
		wantFence := int64(1)
		if r.Owner != owner[r.Scope+"/"+r.Key] || !r.LeaseUntil.Equal(t0.Add(time.Minute)) {
			t.Fatalf("%s/%s stored owner %q until %v, want %q", r.Scope, r.Key, r.Owner, r.LeaseUntil, owner[r.Scope+"/"+r.Key])
		}
		if (r.Key[len(r.Key)-1]-'0')%2 == 0 { // even index: held once by the dead instance
			wantFence = 2
		}
		if r.Fence != wantFence {
			t.Fatalf("%s/%s fence %d, want %d", r.Scope, r.Key, r.Fence, wantFence)
		}
	}
}

// testSharedIntent: two instances create records for one intent at once; one record wins, and
// both instances then find that record by the intent.
func testSharedIntent(t *testing.T, a, b keystore.Store) {
	winner, wins := race(t, func(i int) error {
		rec := sample("t", fmt.Sprintf("k%d", i))
		rec.Intent = "order-42"
		return handle(i, a, b).Create(bg, rec)
	})
	if wins != 1 {
		t.Fatalf("%d of %d concurrent Creates of one intent on two handles succeeded, want 1", wins, racers)
	}
	for name, s := range map[string]keystore.Store{"a": a, "b": b} {
		got, err := s.GetByIntent(bg, "t", "order-42")
		if err != nil {
			t.Fatalf("GetByIntent on %s: %v", name, err)
		}
		if want := fmt.Sprintf("k%d", winner); got.Key != want {
			t.Fatalf("GetByIntent on %s = %q, want the winner %q", name, got.Key, want)
		}
	}
}
