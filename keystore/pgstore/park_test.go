package pgstore_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/pgstore"
)

var parkT0 = time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)

// pendingAt creates a pending record key created at parkT0 + created seconds; with owner set
// it holds a lease until parkT0 + until.
func pendingAt(t *testing.T, s keystore.Store, key string, created int, owner string, until time.Duration) {
	t.Helper()
	at := parkT0.Add(time.Duration(created) * time.Second)
	rec := &keystore.Record{Scope: "t", Key: key, Fingerprint: "f", State: keystore.StatePending,
		Request: keystore.Request{Method: "POST", URL: "/v1/payments"}, CreatedAt: at, UpdatedAt: at}
	if owner != "" {
		rec.Owner, rec.LeaseUntil, rec.Fence = owner, parkT0.Add(until), 1
	}
	if err := s.Create(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
}

// parked returns the parked rows as "key@seconds after parkT0", in key order.
func parked(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT convert_from(key, 'UTF8'), parked_until_ns FROM idem_records
		WHERE parked_until_ns IS NOT NULL ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		var ns int64
		if err := rows.Scan(&k, &ns); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s@%v", k, time.Unix(0, ns).Sub(parkT0)))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// claimKeys runs ClaimExpired for owner at parkT0 + at and returns the keys claimed, checking
// that each is an orphan at that time as the test's model says (not in live).
func claimKeys(t *testing.T, s keystore.Store, owner string, at time.Duration, limit int) string {
	t.Helper()
	now := parkT0.Add(at)
	got, err := s.ClaimExpired(context.Background(), keystore.Lease{Owner: owner, Now: now, Until: now.Add(time.Minute)}, limit)
	if err != nil {
		t.Fatalf("ClaimExpired at %v: %v", at, err)
	}
	keys := make([]string, len(got))
	for i, r := range got {
		keys[i] = r.Key
		if r.Owner != owner || !r.LeaseUntil.Equal(now.Add(time.Minute)) {
			t.Errorf("claimed %s holds %s until %v", r.Key, r.Owner, r.LeaseUntil)
		}
	}
	return strings.Join(keys, " ")
}

// Rows ClaimExpired claims are parked until their new lease lapses; live rows older than the
// orphans are parked once a claim walks past them, all but the newest parkKeep; parked rows
// come back when their lease lapses (parked again if renewed); Release unparks at once;
// orphans come out oldest first throughout and no live lease is claimed.
func TestClaimExpiredParksLiveRows(t *testing.T) {
	pgstore.SetParkLimits(t, 2, 3) // keep 2 unparked, park 3 a statement: several statements a claim
	pool := testSchema(t)()
	s := openStore(t, pool, nil)
	ctx := context.Background()
	for i := 1; i <= 10; i++ {
		pendingAt(t, s, fmt.Sprintf("live%02d", i), i, "busy", time.Hour)
	}
	for i := 11; i <= 15; i++ {
		pendingAt(t, s, fmt.Sprintf("orph%02d", i), i, "dead", -time.Second)
	}
	pendingAt(t, s, "live16", 16, "busy", time.Hour)
	pendingAt(t, s, "free17", 17, "", 0)

	if got := claimKeys(t, s, "inst-b", 0, 2); got != "orph11 orph12" {
		t.Fatalf("first claim: %q, want the two oldest orphans", got)
	}
	// The claimed rows are parked until their new lease lapses; of the live rows the claim
	// walked past (live01..live10) all but the newest two are parked until theirs.
	var want []string
	for i := 1; i <= 8; i++ {
		want = append(want, fmt.Sprintf("live%02d@1h0m0s", i))
	}
	want = append(want, "orph11@1m0s", "orph12@1m0s")
	if got := parked(t, pool); !slices.Equal(got, want) {
		t.Fatalf("parked after the first claim: %v, want %v", got, want)
	}
	if got := claimKeys(t, s, "inst-b", 0, 10); got != "orph13 orph14 orph15 free17" {
		t.Fatalf("second claim: %q", got)
	}
	// Fewer than asked for: every live row but the newest two (live16, live10) is parked.
	want = []string{"free17@1m0s"}
	for i := 1; i <= 9; i++ {
		want = append(want, fmt.Sprintf("live%02d@1h0m0s", i))
	}
	for i := 11; i <= 15; i++ {
		want = append(want, fmt.Sprintf("orph%02d@1m0s", i))
	}
	if got := parked(t, pool); !slices.Equal(got, want) {
		t.Fatalf("parked after the second claim: %v, want %v", got, want)
	}

	if err := s.Renew(ctx, "t", "live01", "busy", 1, parkT0.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "t", "live02", "busy", 1); err != nil {
		t.Fatal(err)
	}
	if got := claimKeys(t, s, "inst-c", time.Minute-time.Nanosecond, 10); got != "live02" {
		t.Fatalf("claim after a Release: %q, want the released row at once", got)
	}
	// An hour later every lease but live01's (renewed) has lapsed: live01 is parked again
	// until its new expiry, the rest come back and are claimed, oldest first, and parked
	// until inst-c's leases lapse.
	order := "live02 live03 live04 live05 live06 live07 live08 live09 live10 orph11 orph12 orph13 orph14 orph15 live16 free17"
	if got := claimKeys(t, s, "inst-c", time.Hour, 100); got != order {
		t.Fatalf("claim at the busy leases' expiry: %q, want %q", got, order)
	}
	want = []string{"live01@3h0m0s"}
	for _, k := range strings.Fields(order) {
		want = append(want, k+"@1h1m0s")
	}
	slices.Sort(want)
	if got := parked(t, pool); !slices.Equal(got, want) {
		t.Fatalf("parked after the expiry: %v, want %v", got, want)
	}
	if got := claimKeys(t, s, "inst-d", 3*time.Hour, 100); got != "live01 "+order {
		t.Fatalf("claim at the renewed lease's expiry: %q, want every record, live01 first", got)
	}
	if got := parked(t, pool); len(got) != 17 {
		t.Fatalf("parked at the end: %v, want every record, claimed", got)
	}
	all, err := s.List(ctx, keystore.StatePending)
	if err != nil || len(all) != 17 {
		t.Fatalf("pending records at the end: %d (%v), want 17", len(all), err)
	}
}

// A row parked by one claimer, claimed by Claim when its lease lapsed, is live again: the next
// unpark parks it until the new lease's expiry instead of handing it out.
func TestParkedRowClaimedByKey(t *testing.T) {
	pgstore.SetParkLimits(t, 0, 10)
	pool := testSchema(t)()
	s := openStore(t, pool, nil)
	pendingAt(t, s, "a", 1, "busy", time.Minute)
	pendingAt(t, s, "b", 2, "dead", 0)
	if got := claimKeys(t, s, "inst-b", 0, 1); got != "b" {
		t.Fatalf("claim: %q", got)
	}
	if got := parked(t, pool); !slices.Equal(got, []string{"a@1m0s", "b@1m0s"}) {
		t.Fatalf("parked: %v, want a (walked past) and b (claimed)", got)
	}
	now := parkT0.Add(time.Minute)
	if _, err := s.Claim(context.Background(), "t", "a", keystore.Lease{Owner: "inst-c", Now: now, Until: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if got := claimKeys(t, s, "inst-d", 2*time.Minute, 10); got != "b" {
		t.Fatalf("claim after Claim of the parked row: %q, want only b (a is live)", got)
	}
	if got := parked(t, pool); !slices.Equal(got, []string{"a@1h1m0s", "b@3m0s"}) {
		t.Fatalf("parked: %v, want a until inst-c's lease, b until inst-d's", got)
	}
}
