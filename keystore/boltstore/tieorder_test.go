package boltstore

import (
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
)

// Two orphans created at the same instant in scopes "bb" and "c": List order is Key, then
// Scope, so bb/a comes first, though the index's records key puts the shorter scope "c"
// ahead.
func TestClaimExpiredTieOrderAcrossScopes(t *testing.T) {
	s := openInternal(t)
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	a := indexRecord("a", t0, "", time.Time{})
	a.Scope = "bb"
	b := indexRecord("b", t0, "", time.Time{})
	b.Scope = "c"
	for _, r := range []*keystore.Record{a, b} {
		if err := s.Create(ictx, r); err != nil {
			t.Fatal(err)
		}
	}
	now := t0.Add(time.Hour)
	got, err := s.ClaimExpired(ictx, keystore.Lease{Owner: "me", Now: now, Until: now.Add(time.Minute)}, 10)
	if err != nil || len(got) != 2 {
		t.Fatal(got, err)
	}
	if got[0].Key != "a" {
		t.Fatalf("order %s/%s, %s/%s; want bb/a first (List order)", got[0].Scope, got[0].Key, got[1].Scope, got[1].Key)
	}
}
