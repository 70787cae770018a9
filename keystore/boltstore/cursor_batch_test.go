package boltstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
)

// One commit carries many writes through the commit's shared cursors: several deferred
// updates of one key, updates of neighbouring keys (one B-tree page), creates between them,
// a Purge, and writes that fail their checks (fenced, or changing the fingerprint) in the
// middle. Each write must do what it does alone: the failing ones fail alone, the others land,
// and the pending index ("unleased", "leased") names exactly the pending records (Verify,
// ClaimExpired). The reused cursors must neither read another key's record nor delete another
// key's index entry.
func TestOneCommitManyWritesThroughSharedCursors(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { advManyWrites(t, seed) })
	}
}

func advManyWrites(t *testing.T, seed uint64) {
	path := filepath.Join(t.TempDir(), "keys.db")
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(seed, 7))
	at := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	model := map[string]*keystore.Record{}
	mk := func(i int) *keystore.Record {
		r := &keystore.Record{Key: fmt.Sprintf("k%04d", i), Intent: fmt.Sprintf("i%04d", i), Fingerprint: "f",
			State: keystore.StatePending, Request: keystore.Request{Method: "POST", URL: "https://x/p"},
			CreatedAt: at.Add(time.Duration(i) * time.Second), UpdatedAt: at}
		if i%3 == 0 {
			r.Owner, r.LeaseUntil, r.Fence = "o", at.Add(time.Duration(i)*time.Minute), 1
		}
		return r
	}
	const n = 300
	for i := 0; i < n; i += 2 { // even keys exist; odd ones are created in the batch
		r := mk(i)
		if err := s.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		model[r.Key] = r
	}
	release := holdLeader(t, s)
	type wantErr struct {
		what string
		ch   chan error
		fail bool
	}
	var waits []wantErr
	queued := 0
	queue := func(what string, fail bool, fn func() error) {
		ch := make(chan error, 1)
		go func() { ch <- fn() }()
		queued++
		waitQueued(t, s, queued)
		waits = append(waits, wantErr{what, ch, fail})
	}
	deferred := func(r *keystore.Record) {
		if err := s.UpdateDeferred(ctx, r); err != nil {
			t.Fatal(err)
		}
		queued++
	}
	for step := range 120 {
		i := rnd.IntN(n)
		key := fmt.Sprintf("k%04d", i)
		cur := model[key]
		switch {
		case cur == nil: // create the neighbour
			r := mk(i)
			queue("create "+key, false, func() error { return s.Create(ctx, r) })
			model[key] = r
		case cur.State != keystore.StatePending:
			continue
		case step%17 == 5: // a fenced write in the middle: fails alone
			r := cur.Clone()
			r.State, r.Fence = keystore.StateSucceeded, 7
			queue("fenced "+key, true, func() error { return s.Update(ctx, r) })
		case step%19 == 7: // a changed fingerprint: fails alone
			r := cur.Clone()
			r.Fingerprint = "g"
			deferredFail := r
			queue("fingerprint "+key, true, func() error { return s.Update(ctx, deferredFail) })
		case step%29 == 11:
			queue("purge", false, func() error { _, err := s.Purge(ctx, at.Add(30*time.Minute)); return err })
			for k, r := range model {
				if r.State.Terminal() && r.UpdatedAt.Before(at.Add(30*time.Minute)) {
					delete(model, k)
				}
			}
		default: // one to three deferred versions of the key
			for v := range 1 + rnd.IntN(3) {
				r := cur.Clone()
				r.Attempts = cur.Attempts + 1
				r.UpdatedAt = at.Add(time.Duration(rnd.IntN(60)) * time.Minute)
				if r.Owner != "" {
					r.LeaseUntil = r.LeaseUntil.Add(time.Hour) // Update keeps the stored lease
				}
				if v == 2 || rnd.IntN(2) == 0 {
					r.State, r.LastStatusCode = keystore.StateSucceeded, 201
					r.Response = &keystore.Response{StatusCode: 201, Body: []byte(key)}
				}
				deferred(r)
				kept := r.Clone()
				kept.LeaseUntil = cur.LeaseUntil
				model[key], cur = kept, kept
				if r.State != keystore.StatePending {
					break
				}
			}
		}
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	for _, w := range waits {
		if err := <-w.ch; (err != nil) != w.fail {
			t.Errorf("%s: err %v, want failure %v", w.what, err, w.fail)
		}
	}
	if err := s.Close(); err != nil { // commits what is left; then read the file alone
		t.Fatal(err)
	}
	s2, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	rep, err := s2.Verify(ctx)
	if err != nil || len(rep.Problems) != 0 {
		t.Fatalf("Verify: %v, problems %v", err, rep.Problems)
	}
	all, err := s2.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(model) {
		t.Errorf("%d records, want %d", len(all), len(model))
	}
	for _, got := range all {
		want := model[got.Key]
		if want == nil || got.State != want.State || got.Attempts != want.Attempts || !got.UpdatedAt.Equal(want.UpdatedAt) ||
			!got.LeaseUntil.Equal(want.LeaseUntil) || got.Owner != want.Owner || got.Fingerprint != want.Fingerprint {
			t.Errorf("record %s = %+v, want %+v", got.Key, got, want)
		}
	}
	var wantFree []string
	for k, r := range model {
		if r.State == keystore.StatePending && (r.Owner == "" || r.LeaseUntil.Before(at.Add(999*time.Hour))) {
			wantFree = append(wantFree, k)
		}
	}
	claimed, err := s2.ClaimExpired(ctx, keystore.Lease{Owner: "p", Now: at.Add(999 * time.Hour), Until: at.Add(1000 * time.Hour)}, 1000)
	if err != nil && !errors.Is(err, keystore.ErrClosed) {
		t.Fatal(err)
	}
	var got []string
	for _, r := range claimed {
		got = append(got, r.Key)
	}
	slices.Sort(got)
	slices.Sort(wantFree)
	if !slices.Equal(got, wantFree) {
		t.Errorf("ClaimExpired claimed %d records %v, want %d %v", len(got), got, len(wantFree), wantFree)
	}
}
