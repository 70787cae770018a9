package keystoretest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
)

// Cases for the optional capabilities of keystore (DeferredUpdater, Pager, BatchPurger).

func testUpdateDeferred(t *testing.T, s keystore.Store) {
	d, ok := s.(keystore.DeferredUpdater)
	if !ok {
		t.Skip("store is not a keystore.DeferredUpdater")
	}
	rec := sample("t", "k")
	rec.Intent = "order-1"
	mustCreate(t, s, rec)
	done := completed(rec, keystore.StateSucceeded, base.Add(time.Minute))
	if err := d.UpdateDeferred(bg, done); err != nil {
		t.Fatalf("UpdateDeferred: %v", err)
	}
	// Visible at once to every read.
	wantEqual(t, "Get after UpdateDeferred", done, mustGet(t, s, "t", "k"))
	byIntent, err := s.GetByIntent(bg, "t", "order-1")
	if err != nil {
		t.Fatalf("GetByIntent: %v", err)
	}
	wantEqual(t, "GetByIntent after UpdateDeferred", done, byIntent)
	recs, err := s.List(bg, keystore.StateSucceeded)
	if err != nil || len(recs) != 1 {
		t.Fatalf("List(succeeded) = %d records, %v; want 1", len(recs), err)
	}
	wantEqual(t, "List after UpdateDeferred", done, recs[0])
	pending, err := s.List(bg, keystore.StatePending)
	if err != nil || len(pending) != 0 {
		t.Fatalf("List(pending) = %d records, %v; want 0", len(pending), err)
	}
	// A later synchronous write is ordered after it.
	again := done.Clone()
	again.Attempts = 9
	mustUpdate(t, s, again)
	wantEqual(t, "Get after a later Update", again, mustGet(t, s, "t", "k"))
	// Bad input is refused at once.
	bad := done.Clone()
	bad.State = "nope"
	wantErr(t, "UpdateDeferred of an invalid record", d.UpdateDeferred(bg, bad), keystore.ErrInvalid)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wantErr(t, "UpdateDeferred after Close", d.UpdateDeferred(bg, done), keystore.ErrClosed)
}

func testListPage(t *testing.T, s keystore.Store) {
	p, ok := s.(keystore.Pager)
	if !ok {
		t.Skip("store is not a keystore.Pager")
	}
	want := map[string]keystore.State{}
	for i := range 23 {
		scope := []string{"a", "b", ""}[i%3]
		rec := sample(scope, fmt.Sprintf("k%02d", i))
		mustCreate(t, s, rec)
		want[scope+"/"+rec.Key] = keystore.StatePending
		if i%4 == 0 {
			mustUpdate(t, s, completed(rec, keystore.StateSucceeded, base.Add(time.Minute)))
			want[scope+"/"+rec.Key] = keystore.StateSucceeded
		}
	}
	for _, limit := range []int{1, 5, 23, 100} {
		for _, states := range [][]keystore.State{nil, {keystore.StatePending}} {
			var got []string
			var after keystore.Cursor
			for pages := 0; ; pages++ {
				if pages > 100 {
					t.Fatalf("limit %d: more than 100 pages", limit)
				}
				page, err := p.ListPage(bg, states, after, limit)
				if err != nil {
					t.Fatalf("ListPage(%v, %q, %d): %v", states, after, limit, err)
				}
				if len(page.Records) > limit || len(page.Damaged) != 0 {
					t.Fatalf("limit %d: page of %d records, %d damaged", limit, len(page.Records), len(page.Damaged))
				}
				for _, r := range page.Records {
					got = append(got, r.Scope+"/"+r.Key)
				}
				if page.Next == "" {
					break
				}
				after = page.Next
			}
			var exp []string
			for k, st := range want {
				if len(states) == 0 || st == states[0] {
					exp = append(exp, k)
				}
			}
			slices.Sort(exp)
			gotSorted := slices.Clone(got)
			slices.Sort(gotSorted)
			if !slices.Equal(gotSorted, exp) || len(slices.Compact(gotSorted)) != len(got) {
				t.Fatalf("limit %d, states %v: listed %v, want each of %v once", limit, states, got, exp)
			}
		}
	}
}

func testPurgeBatch(t *testing.T, s keystore.Store) {
	pb, ok := s.(keystore.BatchPurger)
	if !ok {
		t.Skip("store is not a keystore.BatchPurger")
	}
	cutoff := base.Add(time.Hour)
	old := 0
	for i := range 30 {
		rec := sample("t", fmt.Sprintf("k%02d", i))
		rec.Intent = "intent-" + rec.Key
		mustCreate(t, s, rec)
		switch i % 3 {
		case 0: // old and finished: purged
			mustUpdate(t, s, completed(rec, keystore.StateSucceeded, cutoff.Add(-time.Minute)))
			old++
		case 1: // finished after the cutoff: kept
			mustUpdate(t, s, completed(rec, keystore.StateFailed, cutoff.Add(time.Minute)))
		}
	}
	const limit = 4
	total := 0
	var after keystore.Cursor
	for batches := 0; ; batches++ {
		if batches > 30 {
			t.Fatal("more than 30 batches")
		}
		n, next, err := pb.PurgeBatch(bg, cutoff, after, limit)
		if err != nil {
			t.Fatalf("PurgeBatch: %v", err)
		}
		if n > limit {
			t.Fatalf("PurgeBatch deleted %d records, limit %d", n, limit)
		}
		total += n
		if next == "" {
			break
		}
		after = next
	}
	// A store that examines records in another order may need further passes.
	for pass := 0; total < old && pass < 10; pass++ {
		n, _, err := pb.PurgeBatch(bg, cutoff, "", 100)
		if err != nil {
			t.Fatalf("PurgeBatch: %v", err)
		}
		total += n
	}
	if total != old {
		t.Fatalf("PurgeBatch deleted %d records in all, want %d", total, old)
	}
	for i := range 30 {
		key := fmt.Sprintf("k%02d", i)
		_, err := s.Get(bg, "t", key)
		_, ierr := s.GetByIntent(bg, "t", "intent-"+key)
		if i%3 == 0 {
			wantErr(t, "Get of purged "+key, err, keystore.ErrNotFound)
			wantErr(t, "GetByIntent of purged "+key, ierr, keystore.ErrNotFound)
		} else if err != nil || ierr != nil {
			t.Fatalf("kept %s: Get %v, GetByIntent %v", key, err, ierr)
		}
	}
}

// testUpdateFromState: the write is made only while the stored state is the expected one,
// and a refused write leaves the stored record as it was.
func testUpdateFromState(t *testing.T, s keystore.Store) {
	g, ok := s.(keystore.StateGuardedUpdater)
	if !ok {
		t.Skip("store is not a keystore.StateGuardedUpdater")
	}
	rec := sample("t", "k")
	mustCreate(t, s, rec)
	manual := completed(rec, keystore.StateManual, base.Add(time.Minute))
	mustUpdate(t, s, manual)

	// Two verdicts formed from the same manual record: the first is written, the second is
	// refused and names the state it found.
	first := completed(manual, keystore.StateSucceeded, base.Add(2*time.Minute))
	first.Note = "charge found"
	if err := g.UpdateFromState(bg, first, keystore.StateManual); err != nil {
		t.Fatalf("UpdateFromState(manual) of a manual record: %v", err)
	}
	second := completed(manual, keystore.StateFailed, base.Add(3*time.Minute))
	second.Note = "no charge found"
	err := g.UpdateFromState(bg, second, keystore.StateManual)
	wantErr(t, "UpdateFromState(manual) of a succeeded record", err, keystore.ErrStateChanged)
	if err != nil && !strings.Contains(err.Error(), "succeeded") {
		t.Errorf("UpdateFromState error %q does not name the stored state", err)
	}
	wantEqual(t, "Get after the refused write", first, mustGet(t, s, "t", "k"))

	// Update's own checks still apply, and come first.
	changed := first.Clone()
	changed.Fingerprint = "ff" + changed.Fingerprint[2:]
	wantErr(t, "UpdateFromState changing the fingerprint", g.UpdateFromState(bg, changed, keystore.StateSucceeded), keystore.ErrInvalid)
	missing := sample("t", "absent")
	wantErr(t, "UpdateFromState of a missing record", g.UpdateFromState(bg, missing, keystore.StatePending), keystore.ErrNotFound)
	wantErr(t, "UpdateFromState from an invalid state", g.UpdateFromState(bg, first, "nope"), keystore.ErrInvalid)
}
