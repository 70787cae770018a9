package keystoretest

import (
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
)

// testClaimManual: the lease of a manual record (keystore.ManualClaimer), a cancel by
// reference in flight. It reserves the record as Claim does a pending one, leaves its state
// and contents alone, and fences a verdict formed from the record before the claim.
func testClaimManual(t *testing.T, a, b keystore.Store) {
	ma, okA := a.(keystore.ManualClaimer)
	mb, okB := b.(keystore.ManualClaimer)
	if !okA || !okB {
		t.Skip("store is not a keystore.ManualClaimer")
	}
	rec := sample("t", "k")
	mustCreate(t, a, rec)
	manual := completed(rec, keystore.StateManual, base.Add(time.Minute))
	mustUpdate(t, a, manual)

	got, err := ma.ClaimManual(bg, "t", "k", lease("inst-a", t0, 10*time.Second))
	if err != nil {
		t.Fatalf("ClaimManual of a manual record: %v", err)
	}
	want := leased(manual, "inst-a", t0.Add(10*time.Second), 1)
	wantEqual(t, "ClaimManual result (state and contents unchanged)", want, got)
	wantEqual(t, "Get after ClaimManual, other handle", want, mustGet(t, b, "t", "k"))

	// Another owner is refused while the lease is live, and nothing changes.
	_, err = mb.ClaimManual(bg, "t", "k", lease("inst-b", t0.Add(9*time.Second), time.Minute))
	var ce *keystore.ClaimedError
	if !errors.As(err, &ce) || !errors.Is(err, keystore.ErrClaimed) {
		t.Fatalf("ClaimManual of a live lease: got %v, want a *ClaimedError", err)
	}
	if ce.Owner != "inst-a" || !ce.Until.Equal(t0.Add(10*time.Second)) || ce.Fence != 1 {
		t.Fatalf("ClaimedError = %+v, want holder inst-a until t0+10s at fence 1", ce)
	}
	wantEqual(t, "record after a refused ClaimManual", want, mustGet(t, a, "t", "k"))

	// A verdict formed from the record as it was before the claim carries the old Fence.
	stale := completed(manual, keystore.StateSucceeded, base.Add(2*time.Minute))
	wantErr(t, "Update with the Fence from before ClaimManual", b.Update(bg, stale), keystore.ErrFenced)
	if g, ok := b.(keystore.StateGuardedUpdater); ok {
		wantErr(t, "UpdateFromState with the Fence from before ClaimManual", g.UpdateFromState(bg, stale, keystore.StateManual), keystore.ErrFenced)
	}
	wantEqual(t, "record after the fenced verdicts", want, mustGet(t, a, "t", "k"))

	// Expired: another owner takes it, with the next Fence.
	got, err = mb.ClaimManual(bg, "t", "k", lease("inst-b", t0.Add(10*time.Second), time.Minute))
	if err != nil {
		t.Fatalf("ClaimManual of an expired lease: %v", err)
	}
	wantEqual(t, "ClaimManual after expiry", leased(manual, "inst-b", t0.Add(70*time.Second), 2), got)

	// The holder's verdict, with its Fence, is written; the record can no longer be claimed.
	verdict := completed(manual, keystore.StateFailed, base.Add(3*time.Minute))
	verdict.Fence = 2
	mustUpdate(t, b, verdict)
	_, err = ma.ClaimManual(bg, "t", "k", lease("inst-a", t0.Add(2*time.Minute), time.Minute))
	wantErr(t, "ClaimManual of a failed record", err, keystore.ErrStateChanged)

	// Only manual records: pending and missing ones are refused, and so is a bad lease.
	mustCreate(t, a, sample("t", "p"))
	_, err = ma.ClaimManual(bg, "t", "p", lease("inst-a", t0, time.Minute))
	wantErr(t, "ClaimManual of a pending record", err, keystore.ErrStateChanged)
	wantEqual(t, "pending record after a refused ClaimManual", sample("t", "p"), mustGet(t, b, "t", "p"))
	_, err = ma.ClaimManual(bg, "t", "missing", lease("inst-a", t0, time.Minute))
	wantErr(t, "ClaimManual of a missing record", err, keystore.ErrNotFound)
	_, err = ma.ClaimManual(bg, "t", "k", keystore.Lease{Owner: "inst-a", Now: t0, Until: t0})
	wantErr(t, "ClaimManual with until equal to now", err, keystore.ErrInvalid)
}
