package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
)

// A recovery claims an orphan with ClaimExpired (lease: one minute, so the row is parked
// until then), its call leaves the record pending and the client holds it for the server's
// Retry-After only (releaseOrHold: Renew to now + 5 s, shorter than the claim's lease), then
// the instance dies. Once the 5 s lapse the record holds no live lease: by the keystore
// contract the next ClaimExpired returns it, before any newer orphan: Renew to an earlier
// time than the parked one unparks the row.
func TestRenewShorterUnparksAClaimedOrphan(t *testing.T) {
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
// the record is an orphan, the oldest one, and ClaimExpired must return it then.
func TestRenewShorterUnparksAWalkedPastRow(t *testing.T) {
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

// version1Release is the Release of the release before schema version 2 (commit e4e68a8): it
// clears the lease but knows nothing of parked_until_ns.
const version1Release = `UPDATE idem_records SET owner = NULL, lease_until_ns = NULL
	WHERE tenant = $1 AND key = $2 AND fence = $4 AND (owner = $3 OR owner IS NULL)`

// An instance of the release before version 2, running beside it as docs/KEYSTORE.md allows,
// has a call in flight whose row a version 2 claim walked past and parked until its lease
// (one hour). The call gives up and the old instance releases the record, leaving the parked
// time as it was (it knows nothing of it). The documented delay: version 2 claims leave the
// record out until the parked time, a newer orphan first, and return it once that passes.
func TestVersion1ReleaseBesideVersion2(t *testing.T) {
	pool := testSchema(t)()
	s := openStore(t, pool, nil)
	ctx := context.Background()
	for i := range 257 { // the default parkKeep (256) and one more
		version1Row(t, pool, fmt.Sprintf("live%03d", i), i+1, "old", time.Hour)
	}
	pendingAt(t, s, "orph", 300, "dead", -time.Second)
	if got := claimKeys(t, s, "inst-new", 0, 1); got != "orph" {
		t.Fatalf("first claim: %q, want orph", got)
	}
	tag, err := pool.Exec(ctx, version1Release, []byte("t"), []byte("live000"), "old", int64(1))
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("version 1 Release: %v, %d rows", err, tag.RowsAffected())
	}
	pendingAt(t, s, "newer", 301, "dead", -time.Second)
	if got := claimKeys(t, s, "inst-new", time.Second, 1); got != "newer" {
		t.Fatalf("claim after the old instance released live000: %q, want newer (live000 parked until its old lease); parked: %v",
			got, parked(t, pool)[:1])
	}
	if got := claimKeys(t, s, "inst-new", time.Hour+time.Second, 1); got != "live000" {
		t.Fatalf("claim once live000's parked time passed: %q, want live000", got)
	}
}

// The holder claims its own record again (Claim: "the holder itself may claim again") with a
// shorter lease than the one the row is parked until, and dies: the record is hidden until
// the old lease's expiry.
func TestHolderClaimShorterUnparks(t *testing.T) {
	pool := testSchema(t)()
	s := openStore(t, pool, nil)
	ctx := context.Background()
	pendingAt(t, s, "a", 1, "dead", -time.Second)
	if got := claimKeys(t, s, "inst-b", 0, 1); got != "a" { // parked until parkT0 + 1 min
		t.Fatalf("first claim: %q, want a", got)
	}
	now := parkT0.Add(time.Second)
	if _, err := s.Claim(ctx, "t", "a", keystore.Lease{Owner: "inst-b", Now: now, Until: now.Add(4 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if got := claimKeys(t, s, "inst-c", 10*time.Second, 1); got != "a" {
		t.Fatalf("claim 5 s after a's lease lapsed: %q, want a; parked: %v", got, parked(t, pool))
	}
}
