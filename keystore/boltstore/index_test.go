package boltstore

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
)

var ictx = context.Background()

func indexRecord(key string, created time.Time, owner string, until time.Time) *keystore.Record {
	return &keystore.Record{Key: key, Fingerprint: "fp", State: keystore.StatePending,
		Request:   keystore.Request{Method: http.MethodPost, URL: "/v1/payments", Body: []byte(`{"amount":1}`)},
		CreatedAt: created, UpdatedAt: created, Owner: owner, LeaseUntil: until}
}

// indexEntries returns the keys of both index buckets.
func indexEntries(t *testing.T, s *Store) (unleased, leased []string) {
	t.Helper()
	if err := s.db.View(func(tx *bbolt.Tx) error {
		_ = tx.Bucket(bucketUnleased).ForEach(func(k, _ []byte) error { unleased = append(unleased, string(k)); return nil })
		return tx.Bucket(bucketLeased).ForEach(func(k, _ []byte) error { leased = append(leased, string(k)); return nil })
	}); err != nil {
		t.Fatal(err)
	}
	return unleased, leased
}

// checkIndex fails unless every pending record has exactly one index entry (where reindex
// puts it, or, for a leased record, in "unleased" after its lease expired) and nothing else
// has any.
func checkIndex(t *testing.T, s *Store) {
	t.Helper()
	if err := s.sync(ictx); err != nil {
		t.Fatal(err)
	}
	unleased, leased := indexEntries(t, s)
	all, err := s.List(ictx)
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, rec := range all {
		if rec.State != keystore.StatePending {
			continue
		}
		want++
		k := scopedKey(rec.Scope, rec.Key)
		u := slices.Contains(unleased, string(unleasedKey(k, rec)))
		l := leasedEntry(rec) && slices.Contains(leased, string(leasedKey(k, rec)))
		if u == l {
			t.Errorf("record %q (owner %q, until %v): in unleased %v, in leased %v; want exactly one", rec.Key, rec.Owner, rec.LeaseUntil, u, l)
		}
	}
	if got := len(unleased) + len(leased); got != want {
		t.Errorf("%d index entries for %d pending records", got, want)
	}
}

// sync commits the deferred writes.
func (s *Store) sync(ctx context.Context) error {
	return s.commit.do(ctx, func(*bbolt.Tx) error { return nil })
}

// TestIndexFollowsEveryWrite: after each kind of write, every pending record has exactly one
// index entry and no other record has any; ClaimExpired takes the oldest orphans by the index.
func TestIndexFollowsEveryWrite(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "keys.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t0 := time.Date(2026, 5, 6, 7, 8, 9, 10, time.UTC)
	odd := time.FixedZone("LMT", 3600+75) // an offset in seconds: stored a few seconds off
	steps := []struct {
		name string
		do   func() error
	}{
		{"create unleased", func() error { return s.Create(ictx, indexRecord("a", t0, "", time.Time{})) }},
		{"create leased", func() error {
			return s.Create(ictx, indexRecord("b", t0.Add(time.Second), "x", t0.Add(10*time.Minute)))
		}},
		{"create leased, odd zone", func() error {
			return s.Create(ictx, indexRecord("c", t0.Add(2*time.Second).In(odd), "x", t0.Add(30*time.Second).In(odd)))
		}},
		{"create succeeded", func() error {
			r := indexRecord("d", t0.Add(3*time.Second), "", time.Time{})
			r.State = keystore.StateSucceeded
			return s.Create(ictx, r)
		}},
		{"update pending body", func() error {
			r := indexRecord("b", t0.Add(time.Second), "x", t0.Add(10*time.Minute))
			r.Attempts = 2
			return s.Update(ictx, r)
		}},
		{"claim", func() error {
			_, err := s.Claim(ictx, "", "a", keystore.Lease{Owner: "y", Now: t0, Until: t0.Add(time.Hour)})
			return err
		}},
		{"renew", func() error { return s.Renew(ictx, "", "a", "y", 1, t0.Add(2*time.Hour)) }},
		{"claim expired moves the expired lease of c and claims it", func() error {
			got, err := s.ClaimExpired(ictx, keystore.Lease{Owner: "z", Now: t0.Add(2 * time.Minute), Until: t0.Add(3 * time.Minute)}, 10)
			if err == nil && (len(got) != 1 || got[0].Key != "c") {
				err = fmt.Errorf("claimed %v, want c", got)
			}
			return err
		}},
		{"release", func() error { return s.Release(ictx, "", "c", "z", 1) }},
		{"deferred final write", func() error {
			r := indexRecord("b", t0.Add(time.Second), "x", t0.Add(10*time.Minute))
			r.State = keystore.StateSucceeded
			return s.UpdateDeferred(ictx, r)
		}},
		{"claim expired after every lease", func() error {
			got, err := s.ClaimExpired(ictx, keystore.Lease{Owner: "w", Now: t0.Add(3 * time.Hour), Until: t0.Add(4 * time.Hour)}, 1)
			if err == nil && (len(got) != 1 || got[0].Key != "a") { // the oldest: a (t0), then c
				err = fmt.Errorf("claimed %v, want a", got)
			}
			return err
		}},
		{"an earlier clock finds a live lease in unleased and skips it", func() error {
			got, err := s.ClaimExpired(ictx, keystore.Lease{Owner: "v", Now: t0, Until: t0.Add(time.Second)}, 5)
			if err == nil && len(got) != 1 { // c is released: orphaned at any clock; a is live
				err = fmt.Errorf("claimed %d, want c alone", len(got))
			}
			return err
		}},
		{"final writes", func() error {
			for _, k := range []string{"a", "c"} {
				cur, err := s.Get(ictx, "", k)
				if err != nil {
					return err
				}
				cur.State = keystore.StateFailed
				if err := s.Update(ictx, cur); err != nil {
					return err
				}
			}
			return nil
		}},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		checkIndex(t, s)
		if t.Failed() {
			t.Fatalf("after %s", st.name)
		}
	}
	if u, l := indexEntries(t, s); len(u)+len(l) != 0 {
		t.Fatalf("entries left with no pending record: %q %q", u, l)
	}
}

// TestClaimExpiredMovesExpiryInBoundedCommits: a backlog of expired leases is moved to the
// unleased index maxExpiryMoves per commit, then the claim is a commit of its own; a later
// call, with nothing left to move, takes one commit.
func TestClaimExpiredMovesExpiryInBoundedCommits(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "keys.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t0 := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	n := 2*maxExpiryMoves + 10
	if err := s.db.Update(func(tx *bbolt.Tx) error { // one transaction: fast to set up
		for i := range n {
			rec := indexRecord(fmt.Sprintf("k%05d", i), t0.Add(time.Duration(n-i)*time.Millisecond), "dead", t0.Add(time.Second))
			e, err := encode(rec, nil, &codec{})
			if err != nil {
				return err
			}
			if err := tx.Bucket(bucketRecords).Put(e.key, e.value); err != nil {
				return err
			}
			if err := reindex(tx, e.key, nil, e.rec); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	before := s.commit.commits.Load()
	l := keystore.Lease{Owner: "me", Now: t0.Add(time.Minute), Until: t0.Add(time.Hour)}
	got, err := s.ClaimExpired(ictx, l, 3)
	if err != nil {
		t.Fatal(err)
	}
	if c := s.commit.commits.Load() - before; c != 3 {
		t.Errorf("%d commits for %d expired leases, want 3 (two of moves, one of moves and the claim)", c, n)
	}
	want := []string{fmt.Sprintf("k%05d", n-1), fmt.Sprintf("k%05d", n-2), fmt.Sprintf("k%05d", n-3)}
	for i, r := range got {
		if r.Key != want[i] || r.Owner != "me" || r.Fence != 1 {
			t.Errorf("claimed[%d] = %s owner %q fence %d, want %s, me, 1", i, r.Key, r.Owner, r.Fence, want[i])
		}
	}
	if len(got) != 3 {
		t.Fatalf("claimed %d, want 3", len(got))
	}
	before = s.commit.commits.Load()
	if got, err := s.ClaimExpired(ictx, l, 2); err != nil || len(got) != 2 || got[0].Key != fmt.Sprintf("k%05d", n-4) {
		t.Fatalf("second ClaimExpired: %v, %v", got, err)
	}
	if c := s.commit.commits.Load() - before; c != 1 {
		t.Errorf("%d commits, want 1", c)
	}
	checkIndex(t, s)
}
