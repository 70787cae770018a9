package boltstore

import (
	"bytes"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
)

// claimWith runs one commit of ClaimExpired's claim with the prepared claims pre.
func claimWith(t *testing.T, s *Store, l keystore.Lease, n int, pre map[string]*preparedClaim) []*keystore.Record {
	t.Helper()
	var got []*keystore.Record
	if err := s.commit.do(ictx, func(tx *bbolt.Tx) error {
		if _, err := expireLeases(tx, l.Now, maxExpiryMoves); err != nil {
			return err
		}
		var err error
		got, err = s.claimOrphans(tx, l, n, pre)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// storedValue returns the records bucket value of key.
func storedValue(t *testing.T, s *Store, key string) []byte {
	t.Helper()
	var v []byte
	if err := s.db.View(func(tx *bbolt.Tx) error {
		v = bytes.Clone(tx.Bucket(bucketRecords).Get(scopedKey("", key)))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return v
}

// A claim prepared outside the commit is taken only while the stored value is the one it
// was made from, and then stores what the commit would have: the same records claimed, in
// the same order, with the same lease, Fence and index entries. Records written between the
// preparation and the commit are decided by the commit on what it reads.
func TestClaimExpiredPreparedClaims(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	now := t0.Add(time.Hour)
	l := keystore.Lease{Owner: "me", Now: now, Until: now.Add(time.Minute)}
	setup := func(t *testing.T) *Store {
		s, err := Open(filepath.Join(t.TempDir(), "keys.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		for i, key := range []string{"a", "b", "c", "d", "e"} {
			created := t0.Add(time.Duration(i) * time.Second)
			owner, until := "dead", created.Add(time.Minute) // expired by now
			if key == "c" {
				owner, until = "", time.Time{} // never claimed
			}
			rec := indexRecord(key, created, owner, until)
			rec.Fence = 1
			if err := s.Create(ictx, rec); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}

	// Reference: the same store claimed without prepared claims.
	ref := setup(t)
	want := claimWith(t, ref, l, 3, nil)

	s := setup(t)
	pre := s.prepareClaims(l, 3)
	if len(pre) < 3 {
		t.Fatalf("%d claims prepared, want at least 3", len(pre))
	}
	got := claimWith(t, s, l, 3, pre)
	if len(got) != 3 || len(want) != 3 {
		t.Fatalf("claimed %d with prepared claims, %d without; want 3", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Key != w.Key || g.Owner != "me" || !g.LeaseUntil.Equal(w.LeaseUntil) || g.Fence != w.Fence || g.Fence != 2 {
			t.Errorf("claim %d: got %s owner %q until %v fence %d; want %s owner me until %v fence %d",
				i, g.Key, g.Owner, g.LeaseUntil, g.Fence, w.Key, w.LeaseUntil, w.Fence)
		}
		stored, err := s.Get(ictx, "", g.Key)
		if err != nil || !reflect.DeepEqual(stored, g) {
			t.Errorf("stored %+v, %v; returned %+v", stored, err, g)
		}
		// Cached for the final write that follows: the summary of exactly the stored value.
		v := storedValue(t, s, g.Key)
		sum, err := decodeSummary(scopedKey("", g.Key), v)
		if err != nil {
			t.Fatal(err)
		}
		if c := s.summaries.get(scopedKey("", g.Key), v); c == nil || !reflect.DeepEqual(c, summaryOf(sum)) {
			t.Errorf("summary cache of %s: %+v, want %+v", g.Key, c, summaryOf(sum))
		}
	}
	checkIndex(t, s)
	checkIndex(t, ref)

	// Prepared, then written before the commit while still an orphan at l.Now: "d" by its
	// holder (a later attempt), "e" claimed by another owner whose lease has lapsed since
	// (Fence 2). A claim made from the stale values would lose the attempt, and give "e"
	// the Fence "other" holds: the commit must decide on what it reads.
	s = setup(t)
	pre = s.prepareClaims(l, 5)
	for _, k := range []string{"d", "e"} {
		if pre[string(scopedKey("", k))] == nil {
			t.Fatalf("%s not prepared", k)
		}
	}
	d, err := s.Get(ictx, "", "d")
	if err != nil {
		t.Fatal(err)
	}
	d.Attempts = 5
	if err := s.Update(ictx, d); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ictx, "", "e", keystore.Lease{Owner: "other", Now: t0.Add(time.Hour / 2), Until: now.Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	got = claimWith(t, s, l, 5, pre)
	var keys string
	for _, r := range got {
		keys += r.Key
	}
	if keys != "abcde" {
		t.Fatalf("claimed %q, want \"abcde\"", keys)
	}
	for _, r := range got {
		stored, err := s.Get(ictx, "", r.Key)
		if err != nil || !reflect.DeepEqual(stored, r) {
			t.Fatalf("stored %+v, %v; returned %+v", stored, err, r)
		}
	}
	if d := got[3]; d.Attempts != 5 || d.Fence != 2 {
		t.Errorf("d claimed with attempts %d, fence %d; want 5, 2", d.Attempts, d.Fence)
	}
	if e := got[4]; e.Fence != 3 || e.Owner != "me" {
		t.Errorf("e claimed by %q with fence %d; want me, 3 (after other's 2)", e.Owner, e.Fence)
	}
	checkIndex(t, s)
}

// A record whose stored value is over maxPreparedValue is not prepared, and the commit claims
// it as before.
func TestClaimExpiredLargeRecordNotPrepared(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	now := t0.Add(time.Hour)
	l := keystore.Lease{Owner: "me", Now: now, Until: now.Add(time.Minute)}
	s, err := Open(filepath.Join(t.TempDir(), "keys.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	big := indexRecord("big", t0, "", time.Time{})
	big.Request.Body = bytes.Repeat([]byte("x"), maxPreparedValue)
	small := indexRecord("small", t0.Add(time.Second), "", time.Time{})
	for _, rec := range []*keystore.Record{big, small} {
		if err := s.Create(ictx, rec); err != nil {
			t.Fatal(err)
		}
	}
	pre := s.prepareClaims(l, 2)
	if len(pre) != 1 || pre[string(scopedKey("", "small"))] == nil {
		t.Fatalf("prepared %d claims; want only the small record's", len(pre))
	}
	got := claimWith(t, s, l, 2, pre)
	if len(got) != 2 || got[0].Key != "big" || got[0].Fence != 1 || !bytes.Equal(got[0].Request.Body, big.Request.Body) {
		t.Fatalf("claimed %d records, first %+v; want big (fence 1, its body) then small", len(got), got[0])
	}
	checkIndex(t, s)
}
