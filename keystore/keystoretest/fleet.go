package keystoretest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
)

// The fleet cases: each takes two handles a and b on one store, as two instances see it (Run
// passes the same handle twice). Instance A is owner "inst-a", B is "inst-b".

var fleetCases = []struct {
	name string
	fn   func(t *testing.T, a, b keystore.Store)
}{
	{"Claim", testClaim},
	{"ClaimLiveLease", testClaimLiveLease},
	{"ClaimRefused", testClaimRefused},
	{"ExpiryTakeoverFencesStaleOwner", testExpiryTakeover},
	{"UpdateKeepsLease", testUpdateKeepsLease},
	{"RenewRelease", testRenewRelease},
	{"CreateClaimed", testCreateClaimed},
	{"ClaimExpired", testClaimExpired},
	{"ClaimExpiredLimit", testClaimExpiredLimit},
	{"ConcurrentClaim", testConcurrentClaim},
	{"ConcurrentClaimExpired", testConcurrentClaimExpired},
	{"SharedIntent", testSharedIntent},
	{"ClaimManual", testClaimManual},
}

// t0 is "now" for the lease cases, an hour after the records were created.
var t0 = base.Add(time.Hour)

func lease(owner string, now time.Time, d time.Duration) keystore.Lease {
	return keystore.Lease{Owner: owner, Now: now, Until: now.Add(d)}
}

// leased returns rec with the given lease fields, as the store should hold it.
func leased(rec *keystore.Record, owner string, until time.Time, fence int64) *keystore.Record {
	c := rec.Clone()
	c.Owner, c.LeaseUntil, c.Fence = owner, until, fence
	return c
}

func mustClaim(t *testing.T, s keystore.Store, scope, key string, l keystore.Lease) *keystore.Record {
	t.Helper()
	rec, err := s.Claim(bg, scope, key, l)
	if err != nil {
		t.Fatalf("Claim(%q, %q) by %s: %v", scope, key, l.Owner, err)
	}
	return rec
}

func wantFenced(t *testing.T, what string, err error, fence, current int64, owner string) {
	t.Helper()
	var fe *keystore.FencedError
	if !errors.As(err, &fe) || !errors.Is(err, keystore.ErrFenced) {
		t.Fatalf("%s: got %v, want a *FencedError", what, err)
	}
	if fe.Fence != fence || fe.Current != current || fe.Owner != owner {
		t.Fatalf("%s: FencedError{Fence %d, Current %d, Owner %q}, want {%d, %d, %q}", what, fe.Fence, fe.Current, fe.Owner, fence, current, owner)
	}
}

func testClaim(t *testing.T, a, b keystore.Store) {
	rec := sample("t", "k")
	rec.Intent = "order-1"
	mustCreate(t, a, rec)
	got := mustClaim(t, a, "t", "k", lease("inst-a", t0, 10*time.Second))
	want := leased(rec, "inst-a", t0.Add(10*time.Second), 1)
	wantEqual(t, "Claim result", want, got)
	wantEqual(t, "Get after Claim, other handle", want, mustGet(t, b, "t", "k"))
	byIntent, err := b.GetByIntent(bg, "t", "order-1")
	if err != nil {
		t.Fatalf("GetByIntent: %v", err)
	}
	wantEqual(t, "GetByIntent after Claim", want, byIntent)
}

func testClaimLiveLease(t *testing.T, a, b keystore.Store) {
	rec := sample("t", "k")
	mustCreate(t, a, rec)
	mustClaim(t, a, "t", "k", lease("inst-a", t0, 10*time.Second))
	_, err := b.Claim(bg, "t", "k", lease("inst-b", t0.Add(9*time.Second), time.Minute))
	var ce *keystore.ClaimedError
	if !errors.As(err, &ce) || !errors.Is(err, keystore.ErrClaimed) {
		t.Fatalf("Claim of a live lease: got %v, want a *ClaimedError", err)
	}
	if ce.Owner != "inst-a" || !ce.Until.Equal(t0.Add(10*time.Second)) || ce.Fence != 1 || ce.Key != "k" || ce.Scope != "t" {
		t.Fatalf("ClaimedError = %+v, want holder inst-a until t0+10s at fence 1", ce)
	}
	wantEqual(t, "record after a refused Claim", leased(rec, "inst-a", t0.Add(10*time.Second), 1), mustGet(t, a, "t", "k"))
	// The holder may claim again: a new lease and a new fence.
	got := mustClaim(t, a, "t", "k", lease("inst-a", t0.Add(9*time.Second), 10*time.Second))
	wantEqual(t, "holder's second Claim", leased(rec, "inst-a", t0.Add(19*time.Second), 2), got)
}

func testClaimRefused(t *testing.T, a, b keystore.Store) {
	for _, st := range []keystore.State{keystore.StateSucceeded, keystore.StateFailed, keystore.StateManual} {
		rec := sample("t", string(st))
		rec.State = st
		mustCreate(t, a, rec)
		_, err := b.Claim(bg, "t", string(st), lease("inst-b", t0, time.Minute))
		wantErr(t, "Claim of a "+string(st)+" record", err, keystore.ErrNotPending)
		wantEqual(t, "refused "+string(st)+" record", rec, mustGet(t, a, "t", string(st)))
	}
	_, err := b.Claim(bg, "t", "missing", lease("inst-b", t0, time.Minute))
	wantErr(t, "Claim of a missing record", err, keystore.ErrNotFound)
	mustCreate(t, a, sample("t", "k"))
	bad := map[string]keystore.Lease{
		"no owner":         {Now: t0, Until: t0.Add(time.Minute)},
		"until equals now": {Owner: "inst-b", Now: t0, Until: t0},
		"until before now": {Owner: "inst-b", Now: t0, Until: t0.Add(-time.Second)},
	}
	for name, l := range bad {
		_, err := b.Claim(bg, "t", "k", l)
		wantErr(t, "Claim with "+name, err, keystore.ErrInvalid)
		_, err = b.ClaimExpired(bg, l, 10)
		wantErr(t, "ClaimExpired with "+name, err, keystore.ErrInvalid)
	}
	_, err = b.ClaimExpired(bg, lease("inst-b", t0, time.Minute), 0)
	wantErr(t, "ClaimExpired with limit 0", err, keystore.ErrInvalid)
	wantEqual(t, "record after invalid claims", sample("t", "k"), mustGet(t, a, "t", "k"))
}

// testExpiryTakeover: A's lease expires, B claims the record, and every write of A, the stale
// owner, is refused while B's go through.
func testExpiryTakeover(t *testing.T, a, b keystore.Store) {
	rec := sample("t", "k")
	mustCreate(t, a, rec)
	mine := mustClaim(t, a, "t", "k", lease("inst-a", t0, 10*time.Second))
	// At exactly LeaseUntil the lease is expired (live means LeaseUntil after now).
	theirs := mustClaim(t, b, "t", "k", lease("inst-b", t0.Add(10*time.Second), 30*time.Second))
	wantEqual(t, "takeover", leased(rec, "inst-b", t0.Add(40*time.Second), 2), theirs)

	stale := completed(mine, keystore.StateSucceeded, t0.Add(11*time.Second))
	wantFenced(t, "stale owner's Update", a.Update(bg, stale), 1, 2, "inst-b")
	wantFenced(t, "stale owner's Renew", a.Renew(bg, "t", "k", "inst-a", 1, t0.Add(time.Hour)), 1, 2, "inst-b")
	wantFenced(t, "stale owner's Release", a.Release(bg, "t", "k", "inst-a", 1), 1, 2, "inst-b")
	wantEqual(t, "record after the stale owner's writes", theirs, mustGet(t, b, "t", "k"))

	done := completed(theirs, keystore.StateSucceeded, t0.Add(12*time.Second))
	mustUpdate(t, b, done)
	wantEqual(t, "new owner's Update", done, mustGet(t, a, "t", "k"))
	_, err := a.Claim(bg, "t", "k", lease("inst-a", t0.Add(time.Hour), time.Minute))
	wantErr(t, "Claim after the outcome is stored", err, keystore.ErrNotPending)
}

func testUpdateKeepsLease(t *testing.T, a, b keystore.Store) {
	legacy := sample("t", "never-claimed")
	mustCreate(t, a, legacy)
	next := completed(legacy, keystore.StatePending, base.Add(time.Second))
	next.Response = nil
	mustUpdate(t, b, next) // fence 0 on both sides: an unclaimed record updates as before
	wantEqual(t, "Update of a never-claimed record", next, mustGet(t, a, "t", "never-claimed"))

	rec := sample("t", "k")
	mustCreate(t, a, rec)
	claimed := mustClaim(t, a, "t", "k", lease("inst-a", t0, time.Minute))
	upd := completed(claimed, keystore.StatePending, t0.Add(time.Second))
	upd.Owner, upd.LeaseUntil = "someone-else", t0.Add(24*time.Hour) // Update must ignore these
	mustUpdate(t, a, upd)
	want := leased(upd, "inst-a", t0.Add(time.Minute), 1)
	wantEqual(t, "Update keeps the lease", want, mustGet(t, b, "t", "k"))
	for _, fence := range []int64{0, 2, 7} {
		w := completed(claimed, keystore.StateFailed, t0.Add(2*time.Second))
		w.Fence = fence
		wantFenced(t, "Update with a foreign fence", b.Update(bg, w), fence, 1, "inst-a")
	}
	wantEqual(t, "record after fenced Updates", want, mustGet(t, a, "t", "k"))
	// Immutable fields are checked before the fence.
	w := completed(claimed, keystore.StateFailed, t0)
	w.Fingerprint, w.Fence = "changed", 9
	wantErr(t, "Update changing the fingerprint", b.Update(bg, w), keystore.ErrInvalid)
}

func testRenewRelease(t *testing.T, a, b keystore.Store) {
	rec := sample("t", "k")
	mustCreate(t, a, rec)
	mustClaim(t, a, "t", "k", lease("inst-a", t0, 10*time.Second))
	if err := a.Renew(bg, "t", "k", "inst-a", 1, t0.Add(20*time.Second)); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	wantEqual(t, "after Renew", leased(rec, "inst-a", t0.Add(20*time.Second), 1), mustGet(t, b, "t", "k"))
	_, err := b.Claim(bg, "t", "k", lease("inst-b", t0.Add(15*time.Second), time.Minute))
	wantErr(t, "Claim of a renewed lease", err, keystore.ErrClaimed)
	// Expired but not taken: the holder may still renew (its fence is current).
	if err := a.Renew(bg, "t", "k", "inst-a", 1, t0.Add(time.Hour)); err != nil {
		t.Fatalf("Renew of an expired, untaken lease: %v", err)
	}
	wantFenced(t, "Renew by another owner at the same fence", b.Renew(bg, "t", "k", "inst-b", 1, t0.Add(time.Hour)), 1, 1, "inst-a")
	wantFenced(t, "Release by another owner", b.Release(bg, "t", "k", "inst-b", 1), 1, 1, "inst-a")
	wantErr(t, "Renew without owner", a.Renew(bg, "t", "k", "", 1, t0), keystore.ErrInvalid)
	wantErr(t, "Renew to a zero time", a.Renew(bg, "t", "k", "inst-a", 1, time.Time{}), keystore.ErrInvalid)
	wantErr(t, "Release without owner", a.Release(bg, "t", "k", "", 1), keystore.ErrInvalid)
	wantErr(t, "Renew of a missing record", a.Renew(bg, "t", "nope", "inst-a", 1, t0), keystore.ErrNotFound)
	wantErr(t, "Release of a missing record", a.Release(bg, "t", "nope", "inst-a", 1), keystore.ErrNotFound)

	if err := a.Release(bg, "t", "k", "inst-a", 1); err != nil {
		t.Fatalf("Release: %v", err)
	}
	released := leased(rec, "", time.Time{}, 1)
	wantEqual(t, "after Release", released, mustGet(t, b, "t", "k"))
	if err := a.Release(bg, "t", "k", "inst-a", 1); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	wantFenced(t, "Renew after Release", a.Renew(bg, "t", "k", "inst-a", 1, t0.Add(time.Hour)), 1, 1, "")
	wantEqual(t, "after second Release and refused Renew", released, mustGet(t, b, "t", "k"))
	got := mustClaim(t, b, "t", "k", lease("inst-b", t0.Add(time.Second), time.Minute))
	wantEqual(t, "Claim after Release", leased(rec, "inst-b", t0.Add(61*time.Second), 2), got)
}

func testCreateClaimed(t *testing.T, a, b keystore.Store) {
	rec := leased(sample("t", "k"), "inst-a", t0.Add(time.Minute), 1)
	rec.Intent = "order-1"
	mustCreate(t, a, rec)
	wantEqual(t, "record created claimed", rec, mustGet(t, b, "t", "k"))
	_, err := b.Claim(bg, "t", "k", lease("inst-b", t0, time.Minute))
	wantErr(t, "Claim of a record created claimed", err, keystore.ErrClaimed)
	upd := completed(rec, keystore.StateSucceeded, t0)
	mustUpdate(t, a, upd)
	wantEqual(t, "creator's Update", upd, mustGet(t, b, "t", "k"))

	negative := sample("t", "neg")
	negative.Fence = -1
	wantErr(t, "Create with a negative fence", b.Create(bg, negative), keystore.ErrInvalid)
	ownerless := sample("t", "ownerless")
	ownerless.LeaseUntil = t0
	wantErr(t, "Create with a lease but no owner", b.Create(bg, ownerless), keystore.ErrInvalid)
}

func testClaimExpired(t *testing.T, a, b keystore.Store) {
	specs := []struct {
		scope, key string
		state      keystore.State
		owner      string
		until      time.Duration // relative to t0
		fence      int64
		orphan     bool
	}{
		{"t1", "never-claimed", keystore.StatePending, "", 0, 0, true},
		{"t2", "expired", keystore.StatePending, "dead", -time.Second, 3, true},
		{"t1", "at-expiry", keystore.StatePending, "dead", 0, 1, true},
		{"t1", "live", keystore.StatePending, "inst-a", time.Second, 1, false},
		{"t1", "live-own", keystore.StatePending, "inst-b", time.Second, 4, false},
		{"t2", "released", keystore.StatePending, "", 0, 2, true},
		{"t1", "succeeded", keystore.StateSucceeded, "dead", -time.Hour, 1, false},
		{"t1", "failed", keystore.StateFailed, "", 0, 0, false},
		{"t2", "manual", keystore.StateManual, "", 0, 0, false},
	}
	var want []*keystore.Record
	for i, sp := range specs {
		rec := sample(sp.scope, sp.key)
		rec.State, rec.Owner, rec.Fence = sp.state, sp.owner, sp.fence
		if sp.owner != "" {
			rec.LeaseUntil = t0.Add(sp.until)
		}
		rec.CreatedAt = base.Add(time.Duration(len(specs)-i) * time.Second) // last created first
		mustCreate(t, a, rec)
		if sp.orphan {
			want = append([]*keystore.Record{leased(rec, "inst-b", t0.Add(time.Minute), sp.fence+1)}, want...)
		}
	}
	got, err := b.ClaimExpired(bg, lease("inst-b", t0, time.Minute), 100)
	if err != nil {
		t.Fatalf("ClaimExpired: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("ClaimExpired returned %d records, want %d: %v", len(got), len(want), keys(got))
	}
	for i := range want {
		wantEqual(t, "ClaimExpired record "+want[i].Key, want[i], got[i])
		wantEqual(t, "stored orphan "+want[i].Key, want[i], mustGet(t, a, want[i].Scope, want[i].Key))
	}
	again, err := a.ClaimExpired(bg, lease("inst-a", t0.Add(time.Second-time.Nanosecond), time.Minute), 100)
	if err != nil || len(again) != 0 {
		t.Fatalf("second ClaimExpired inside the new leases: %v, %v; want none", keys(again), err)
	}
	// Once the new leases expire, another instance takes them over, fence again incremented.
	later, err := a.ClaimExpired(bg, lease("inst-a", t0.Add(time.Minute), time.Minute), 100)
	if err != nil || len(later) != len(want)+2 { // plus "live" and "live-own", expired by now
		t.Fatalf("ClaimExpired after expiry: %v, %v; want %d records", keys(later), err, len(want)+2)
	}
	stale := completed(got[0], keystore.StateSucceeded, t0)
	wantFenced(t, "Update by the reclaimer whose lease was taken", b.Update(bg, stale), got[0].Fence, got[0].Fence+1, "inst-a")
}

func testClaimExpiredLimit(t *testing.T, a, b keystore.Store) {
	for i, k := range []string{"c", "a", "b", "d"} {
		rec := sample("t", k)
		rec.CreatedAt = base.Add(time.Duration(i) * time.Second)
		mustCreate(t, a, rec)
	}
	var order string
	for round := range 3 {
		got, err := b.ClaimExpired(bg, lease("inst-b", t0, time.Minute), 3)
		if err != nil {
			t.Fatalf("ClaimExpired round %d: %v", round, err)
		}
		for _, r := range got {
			order += r.Key
		}
	}
	if order != "cabd" {
		t.Fatalf("ClaimExpired with limit 3, three rounds, claimed %q; want \"cabd\" (oldest first, each once)", order)
	}
}

func keys(recs []*keystore.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Scope + "/" + r.Key
	}
	return out
}

func testLeaseClosed(t *testing.T, s keystore.Store) {
	mustCreate(t, s, sample("t", "k"))
	ctx, cancel := context.WithCancel(bg)
	cancel()
	l := lease("inst-a", t0, time.Minute)
	_, err := s.Claim(ctx, "t", "k", l)
	wantErr(t, "Claim with a cancelled context", err, context.Canceled)
	_, err = s.ClaimExpired(ctx, l, 1)
	wantErr(t, "ClaimExpired with a cancelled context", err, context.Canceled)
	wantErr(t, "Renew with a cancelled context", s.Renew(ctx, "t", "k", "inst-a", 0, t0), context.Canceled)
	wantErr(t, "Release with a cancelled context", s.Release(ctx, "t", "k", "inst-a", 0), context.Canceled)
	wantEqual(t, "record after cancelled lease calls", sample("t", "k"), mustGet(t, s, "t", "k"))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	_, err = s.Claim(bg, "t", "k", l)
	wantErr(t, "Claim after Close", err, keystore.ErrClosed)
	_, err = s.ClaimExpired(bg, l, 1)
	wantErr(t, "ClaimExpired after Close", err, keystore.ErrClosed)
	wantErr(t, "Renew after Close", s.Renew(bg, "t", "k", "inst-a", 0, t0), keystore.ErrClosed)
	wantErr(t, "Release after Close", s.Release(bg, "t", "k", "inst-a", 0), keystore.ErrClosed)
}
