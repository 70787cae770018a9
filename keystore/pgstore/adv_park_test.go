package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// A recovery claims an orphan with ClaimExpired (lease: one minute, so the row is parked
// until then), its call leaves the record pending and the client holds it for the server's
// Retry-After only (releaseOrHold: Renew to now + 5 s, shorter than the claim's lease), then
// the instance dies. Once the 5 s lapse the record holds no live lease: by the keystore
// contract the next ClaimExpired returns it, before any newer orphan. It stays parked until
// the first claim's lease (one minute) and a newer orphan comes out first.
func TestAdvRenewShorterHidesParkedOrphan(t *testing.T) {
	pool := testSchema(t)()
	s := openStore(t, pool, nil)
	ctx := context.Background()
	pendingAt(t, s, "a", 1, "dead", -time.Second)
	if got := claimKeys(t, s, "inst-b", 0, 1); got != "a" {
		t.Fatalf("first claim: %q, want a", got)
	}
	// inst-b holds a for the server's 5 s Retry-After (Renew, as releaseOrHold does), then dies.
	if err := s.Renew(ctx, "t", "a", "inst-b", 2, parkT0.Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	pendingAt(t, s, "b", 2, "dead", -time.Second) // a newer orphan
	rec, err := s.Get(ctx, "t", "a")
	if err != nil {
		t.Fatal(err)
	}
	now := parkT0.Add(10 * time.Second)
	if rec.LeaseUntil.After(now) {
		t.Fatalf("a's lease until %v is live at %v: the test's premise is wrong", rec.LeaseUntil, now)
	}
	if got := claimKeys(t, s, "inst-c", 10*time.Second, 1); got != "a" {
		t.Fatalf("claim 5 s after a's lease lapsed: %q, want a (the oldest orphan); parked: %v", got, parked(t, pool))
	}
}

// The same through the walk: a call in flight (created claimed by Create, lease one hour) is
// parked when a claim walks past it with parkKeep (256) younger live rows; the call ends
// pending and holds the record for 1 s (Renew), and its instance dies. From parkT0 + 1 s
// the record is an orphan, the oldest one; ClaimExpired leaves it out for the hour.
func TestAdvRenewShorterHidesWalkedPastRow(t *testing.T) {
	pool := testSchema(t)()
	s := openStore(t, pool, nil)
	ctx := context.Background()
	for i := range 257 { // the default parkKeep (256) and one more
		pendingAt(t, s, fmt.Sprintf("live%03d", i), i+1, "busy", time.Hour)
	}
	pendingAt(t, s, "orph", 300, "dead", -time.Second)
	if got := claimKeys(t, s, "inst-b", 0, 1); got != "orph" {
		t.Fatalf("first claim: %q, want orph", got)
	}
	if err := s.Renew(ctx, "t", "live000", "busy", 1, parkT0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := claimKeys(t, s, "inst-c", 2*time.Second, 1); got != "live000" {
		t.Fatalf("claim 1 s after live000's lease lapsed: %q, want live000", got)
	}
}
