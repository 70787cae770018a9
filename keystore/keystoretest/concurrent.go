package keystoretest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
)

// racers is how many goroutines race for one key or intent.
const racers = 32

// race runs fn(i) for i in [0, racers) at once. It returns how many calls returned nil and
// the index of one that did. Any error other than ErrExists fails t.
func race(t *testing.T, fn func(i int) error) (winner int, wins int) {
	t.Helper()
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		won   atomic.Int64
		n     atomic.Int64
	)
	for i := range racers {
		wg.Go(func() {
			<-start
			switch err := fn(i); {
			case err == nil:
				n.Add(1)
				won.Store(int64(i))
			case !errors.Is(err, keystore.ErrExists):
				t.Errorf("racer %d: %v, want nil or ErrExists", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	return int(won.Load()), int(n.Load())
}

func testConcurrentCreateSameKey(t *testing.T, s keystore.Store) {
	winner, wins := race(t, func(i int) error {
		rec := sample("t", "k")
		rec.Attempts = i
		return s.Create(bg, rec)
	})
	if wins != 1 {
		t.Fatalf("%d of %d concurrent Creates of one key succeeded, want 1", wins, racers)
	}
	if got := mustGet(t, s, "t", "k"); got.Attempts != winner {
		t.Fatalf("stored record from racer %d, winner was %d", got.Attempts, winner)
	}
}

func testConcurrentCreateSameIntent(t *testing.T, s keystore.Store) {
	winner, wins := race(t, func(i int) error {
		rec := sample("t", fmt.Sprintf("k%d", i))
		rec.Intent = "order-1"
		return s.Create(bg, rec)
	})
	if wins != 1 {
		t.Fatalf("%d of %d concurrent Creates of one intent succeeded, want 1", wins, racers)
	}
	got, err := s.GetByIntent(bg, "t", "order-1")
	if err != nil {
		t.Fatalf("GetByIntent: %v", err)
	}
	if want := fmt.Sprintf("k%d", winner); got.Key != want {
		t.Fatalf("GetByIntent = %q, want the winner %q", got.Key, want)
	}
	all, err := s.List(bg)
	if err != nil || len(all) != 1 {
		t.Fatalf("List after the race: %d records, %v; want 1", len(all), err)
	}
}

// testConcurrentMixed runs every operation from many goroutines at once (meant for -race) and
// then checks that the store holds exactly what the writers left: every record in its final
// state, every purgeable record purged exactly once, one winner for a contended key.
func testConcurrentMixed(t *testing.T, s keystore.Store) {
	const workers, perWorker = 8, 12
	cutoff := base.Add(time.Hour)
	var (
		wg     sync.WaitGroup
		purged atomic.Int64
		shared atomic.Int64
	)
	key := func(w, i int) string { return fmt.Sprintf("w%d-%d", w, i) }
	// Every third record ends failed before cutoff: purgeable.
	purgeable := func(i int) bool { return i%3 == 0 }
	for w := range workers {
		wg.Go(func() {
			scope := fmt.Sprintf("scope-%d", w%2)
			for i := range perWorker {
				rec := sample(scope, key(w, i))
				rec.Intent = "intent-" + key(w, i)
				if err := s.Create(bg, rec); err != nil {
					t.Errorf("Create: %v", err)
					return
				}
				if got, err := s.GetByIntent(bg, scope, rec.Intent); err != nil || got.Key != rec.Key {
					t.Errorf("GetByIntent: %v", err)
				}
				final := completed(rec, keystore.StateSucceeded, cutoff.Add(time.Minute))
				if purgeable(i) {
					final = completed(rec, keystore.StateFailed, cutoff.Add(-time.Minute))
				}
				if err := s.Update(bg, final); err != nil {
					t.Errorf("Update: %v", err)
				}
				if err := s.Create(bg, sample("shared", "contended")); err == nil {
					shared.Add(1)
				} else if !errors.Is(err, keystore.ErrExists) {
					t.Errorf("Create of the contended key: %v", err)
				}
				if _, err := s.List(bg, keystore.StateSucceeded); err != nil {
					t.Errorf("List: %v", err)
				}
				if i%4 == 0 {
					n, err := s.Purge(bg, cutoff)
					if err != nil {
						t.Errorf("Purge: %v", err)
					}
					purged.Add(int64(n))
				}
			}
		})
	}
	wg.Wait()
	n, err := s.Purge(bg, cutoff)
	if err != nil {
		t.Fatalf("final Purge: %v", err)
	}
	purged.Add(int64(n))
	wantPurged := 0
	for w := range workers {
		scope := fmt.Sprintf("scope-%d", w%2)
		for i := range perWorker {
			got, err := s.Get(bg, scope, key(w, i))
			if purgeable(i) {
				wantPurged++
				wantErr(t, "Get of a purged record", err, keystore.ErrNotFound)
				continue
			}
			if err != nil {
				t.Fatalf("Get(%s): %v", key(w, i), err)
			}
			if got.State != keystore.StateSucceeded {
				t.Fatalf("%s: state %q, want succeeded", key(w, i), got.State)
			}
		}
	}
	if int(purged.Load()) != wantPurged {
		t.Fatalf("Purge calls removed %d records in total, want %d", purged.Load(), wantPurged)
	}
	if shared.Load() != 1 {
		t.Fatalf("contended key created %d times, want 1", shared.Load())
	}
}
