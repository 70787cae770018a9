package keystore

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Under a steady load with a retention purge, Memory stays bounded: finished records are
// dropped in O(batch) steps, the queue of finished records does not grow, and the maps are
// rebuilt once the store has shrunk to a quarter of its peak.
func TestMemoryPurgeBatchBounded(t *testing.T) {
	ctx := context.Background()
	m := NewMemory()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const n = 10_000
	for i := range n {
		rec := &Record{Key: fmt.Sprintf("k%05d", i), Intent: fmt.Sprintf("i%05d", i), State: StatePending,
			Request:   Request{Method: "POST", URL: "/v1/payments", Body: []byte("{}")},
			CreatedAt: t0, UpdatedAt: t0.Add(time.Duration(i) * time.Millisecond)}
		if err := m.Create(ctx, rec); err != nil {
			t.Fatal(err)
		}
		rec.State = StateSucceeded
		if err := m.Update(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	if m.peak != n || m.finished.len() != n {
		t.Fatalf("peak %d, finished queue %d; want %d, %d", m.peak, m.finished.len(), n, n)
	}
	// Purge all but the newest 1,000 in steps of 100: never more than 100 per step.
	cutoff := t0.Add((n - 1000) * time.Millisecond)
	total, steps := 0, 0
	var after Cursor
	for {
		k, next, err := m.PurgeBatch(ctx, cutoff, after, 100)
		if err != nil {
			t.Fatal(err)
		}
		if k > 100 {
			t.Fatalf("a step deleted %d", k)
		}
		total, steps = total+k, steps+1
		if next == "" {
			break
		}
		after = next
	}
	if total != n-1000 || len(m.records) != 1000 || len(m.intents) != 1000 {
		t.Fatalf("deleted %d in %d steps; %d records, %d intents left", total, steps, len(m.records), len(m.intents))
	}
	if m.peak >= n || m.peak > 4*len(m.records) {
		t.Fatalf("peak %d after the purge, %d records: the maps were not rebuilt", m.peak, len(m.records))
	}
	if m.finished.len() != 1000 {
		t.Fatalf("finished queue holds %d entries, want 1000", m.finished.len())
	}
	if _, err := m.Get(ctx, "", "k00000"); err != ErrNotFound {
		t.Fatalf("Get of a purged record: %v", err)
	}
	if _, err := m.GetByIntent(ctx, "", fmt.Sprintf("i%05d", n-1)); err != nil {
		t.Fatalf("GetByIntent of a kept record: %v", err)
	}
}

// PurgeBatch refuses a cursor it cannot have issued, a negative one too.
func TestMemoryPurgeBatchRefusesForeignCursors(t *testing.T) {
	m := NewMemory()
	for _, c := range []Cursor{"x", "-1", "-9223372036854775808", "1.5"} {
		if _, _, err := m.PurgeBatch(context.Background(), time.Now(), c, 10); err != ErrInvalid {
			t.Errorf("cursor %q: %v, want ErrInvalid", c, err)
		}
	}
}

// A pending record is updated in place (no allocation); a terminal one gets a new version,
// so that the finished log's entry for the old version is recognised as stale: a record
// finished long ago and written again since is not purged on its old time.
func TestMemoryUpdateVersions(t *testing.T) {
	ctx := context.Background()
	m := NewMemory()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := &Record{Key: "k", State: StatePending, Request: Request{Method: "POST", URL: "/v1/payments", Body: []byte("{}")},
		CreatedAt: t0, UpdatedAt: t0}
	if err := m.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	k := scopedName{"", "k"}
	first := m.records[k]
	rec.Attempts, rec.UpdatedAt = 1, t0.Add(time.Second)
	if err := m.Update(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if m.records[k] != first {
		t.Fatal("a pending record was not updated in place")
	}
	rec.State, rec.UpdatedAt = StateSucceeded, t0.Add(2*time.Second)
	if err := m.Update(ctx, rec); err != nil {
		t.Fatal(err)
	}
	finished := m.records[k]
	rec.Note, rec.UpdatedAt = "checked", t0.Add(time.Hour)
	if err := m.Update(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if m.records[k] == finished {
		t.Fatal("a terminal record was updated in place")
	}
	// The cutoff lies between the first finish and the second write: nothing to purge.
	if n, _, err := m.PurgeBatch(ctx, t0.Add(time.Minute), "", 10); err != nil || n != 0 {
		t.Fatalf("PurgeBatch: %d, %v; want 0", n, err)
	}
	got, err := m.Get(ctx, "", "k")
	if err != nil || got.Note != "checked" || got.Attempts != 1 || got.State != StateSucceeded {
		t.Fatalf("Get: %+v, %v", got, err)
	}
	if n, _, err := m.PurgeBatch(ctx, t0.Add(2*time.Hour), "", 10); err != nil || n != 1 {
		t.Fatalf("PurgeBatch past the second write: %d, %v; want 1", n, err)
	}
}
