package boltstore_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// A deferred write is visible from the moment UpdateDeferred returns, also to a read whose
// transaction began just before the commit that carries it and that checks the overlay just
// after that commit settled it.
func TestDeferredWritesStayVisibleAcrossTheirCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	s := open(t, path, &boltstore.Options{FlushDelay: time.Millisecond})
	const n = 150
	for round := range 4 {
		for i := range n {
			rec := record("t", fmt.Sprintf("r%d-%03d", round, i))
			if err := s.Create(bg, rec); err != nil {
				t.Fatal(err)
			}
			rec.State = keystore.StateSucceeded
			if err := s.UpdateDeferred(bg, rec); err != nil {
				t.Fatal(err)
			}
		}
		for range 20 { // the flushes run meanwhile
			left, err := s.List(bg, keystore.StatePending)
			if err != nil || len(left) != 0 {
				t.Fatalf("round %d: List(pending) = %d records, %v; want 0", round, len(left), err)
			}
			page, err := s.ListPage(bg, []keystore.State{keystore.StatePending}, "", 10*n)
			if err != nil || len(page.Records) != 0 {
				t.Fatalf("round %d: ListPage(pending) = %d records, %v; want 0", round, len(page.Records), err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path, nil)
	left, err := s.List(bg, keystore.StatePending)
	if err != nil || len(left) != 0 {
		t.Fatalf("after Close and Open: %d pending, %v; want every deferred write committed", len(left), err)
	}
}
