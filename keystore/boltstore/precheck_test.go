package boltstore

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
)

// Open's inspection (checkFile) must never refuse a sound file: a false alarm would keep a
// service from starting. Random stores (keys of every length, bodies from a few bytes to
// several pages, updates, purges, both freelist modes), each checked against bbolt's own
// Tx.Check.
func TestCheckFileAcceptsSoundStores(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(seed, 99))
			path := filepath.Join(t.TempDir(), "keys.db")
			s, err := Open(path, &Options{SyncFreelist: seed%2 == 0})
			if err != nil {
				t.Fatal(err)
			}
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			n := 300 + rnd.IntN(300)
			var wg sync.WaitGroup
			for g := range 8 { // concurrent writers share commits: fewer fsyncs, a faster test
				grnd := rand.New(rand.NewPCG(seed, uint64(g)))
				wg.Go(func() {
					for i := g; i < n; i += 8 {
						key := fmt.Sprintf("%0*d", 1+grnd.IntN(200), i) // lengths vary, orders interleave
						scope := []string{"", "t1", strings.Repeat("s", 1+grnd.IntN(100))}[grnd.IntN(3)]
						rec := &keystore.Record{Scope: scope, Key: key, Intent: "intent-" + key, Fingerprint: "fp",
							State: keystore.StatePending, CreatedAt: now, UpdatedAt: now,
							Request: keystore.Request{Method: http.MethodPost, URL: "/v1/payments",
								Body: []byte(strings.Repeat("b", 1+grnd.IntN(3*4096*(i%7/6)+300)))}}
						if err := s.Create(ctx, rec); err != nil {
							t.Error(err)
							return
						}
						if grnd.IntN(3) == 0 {
							rec.State, rec.UpdatedAt = keystore.StateSucceeded, now.Add(-time.Hour)
							rec.Response = &keystore.Response{StatusCode: 201, Body: []byte(`{"id":"x"}`)}
							if err := s.Update(ctx, rec); err != nil {
								t.Error(err)
								return
							}
						}
						if i%200 == 199 {
							if _, err := s.Purge(ctx, now); err != nil {
								t.Error(err)
								return
							}
						}
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if err := checkFile(path, true); err != nil {
				t.Fatalf("inspection of a sound store (%d records written): %v", n, err)
			}
			db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := db.View(func(tx *bbolt.Tx) error {
				var first error
				for err := range tx.Check() { // drained: the checker must end before the rollback
					first = cmp.Or(first, err)
				}
				return first
			}); err != nil {
				t.Fatalf("bbolt's own check: %v", err)
			}
		})
	}
}
