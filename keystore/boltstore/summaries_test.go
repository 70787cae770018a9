package boltstore

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
)

// summaryOf gives what decodeSummary gives for the record's encoding, whatever the times'
// zones and monotonic readings: the rules read the same fields, and a lease kept from it
// (keepLease) encodes to the same bytes.
func TestSummaryOfMatchesDecode(t *testing.T) {
	wall := time.Date(2026, 12, 1, 13, 4, 5, 123456789, time.UTC)
	now := time.Now() // carries a monotonic reading
	zones := map[string]time.Time{
		"utc":       wall,
		"local":     wall.Local(),
		"+05:30":    wall.In(time.FixedZone("IST", 5*3600+1800)),
		"-03:00":    wall.In(time.FixedZone("", -3*3600)),
		"monotonic": now,
		"zero":      {},
	}
	for name, at := range zones {
		t.Run(name, func(t *testing.T) {
			rec := &keystore.Record{Scope: "tenant", Key: "k-" + name, Intent: "order-" + name,
				Fingerprint: "f", State: keystore.StatePending,
				Request:   keystore.Request{Method: http.MethodPost, URL: "/v1/payments", Body: []byte(`{}`)},
				CreatedAt: at, UpdatedAt: at, Owner: "host-1", LeaseUntil: at.Add(time.Minute), Fence: 3}
			e, err := encode(rec, nil, &codec{})
			if err != nil {
				t.Fatal(err)
			}
			want, err := decodeSummary(e.key, e.value)
			if err != nil {
				t.Fatal(err)
			}
			got := summaryOf(e.rec)
			if got.Scope != want.Scope || got.Key != want.Key || got.Intent != want.Intent ||
				got.Fingerprint != want.Fingerprint || got.State != want.State || got.Owner != want.Owner ||
				got.Fence != want.Fence || !got.CreatedAt.Equal(want.CreatedAt) ||
				!got.UpdatedAt.Equal(want.UpdatedAt) || !got.LeaseUntil.Equal(want.LeaseUntil) {
				t.Fatalf("summaryOf %+v\ndecodeSummary %+v", got, want)
			}
			// The final write of another owner's view keeps the stored lease: same bytes either way.
			next := rec.Clone()
			next.State, next.Owner, next.LeaseUntil, next.Fence = keystore.StateSucceeded, "", time.Time{}, 3
			a, b := next.Clone(), next.Clone()
			keystore.KeepLease(a, got)
			keystore.KeepLease(b, want)
			ja, _ := (&codec{}).value(e.key, keystore.StoredCopy(a))
			jb, _ := (&codec{}).value(e.key, keystore.StoredCopy(b))
			if !bytes.Equal(ja, jb) {
				t.Fatalf("kept lease encodes differently:\n%s\n%s", ja, jb)
			}
		})
	}
}

// The cache holds a pending record this store wrote and drops it when it is final; a value
// rewritten since (here by a takeover's Claim) is decoded, so the fence still refuses the
// stale owner.
func TestSummaryCacheFollowsTheStoredValue(t *testing.T) {
	ctx := context.Background()
	s := openSummaryTest(t)
	newRec := func(key string) *keystore.Record {
		return pendingRecord(key, []byte(`{}`), summaryTestNow.Add(time.Second))
	}
	now := summaryTestNow
	entries := func() int {
		s.summaries.mu.Lock()
		defer s.summaries.mu.Unlock()
		return len(s.summaries.m)
	}

	// Created, updated while pending, then final: cached, then dropped.
	rec := newRec("k1")
	if err := s.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if n := entries(); n != 1 {
		t.Fatalf("%d cache entries after Create, want 1", n)
	}
	rec.Attempts = 1
	if err := s.Update(ctx, rec); err != nil {
		t.Fatal(err)
	}
	rec.State = keystore.StateSucceeded
	if err := s.Update(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if n := entries(); n != 0 {
		t.Fatalf("%d cache entries after the final write, want 0", n)
	}

	// Taken over after the lease expired: the stale owner's write is fenced.
	stale := newRec("k2")
	if err := s.Create(ctx, stale); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "", "k2", keystore.Lease{Owner: "b", Now: now.Add(2 * time.Second), Until: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	stale.State = keystore.StateSucceeded
	if err := s.Update(ctx, stale); !errors.Is(err, keystore.ErrFenced) {
		t.Fatalf("stale owner's Update: %v, want ErrFenced", err)
	}
	if got, err := s.Get(ctx, "", "k2"); err != nil || got.State != keystore.StatePending || got.Owner != "b" || got.Fence != 2 {
		t.Fatalf("after the refused write: %+v, %v", got, err)
	}

	// Bounded: records left pending stop being cached at maxSummaries.
	for i := range maxSummaries + 10 {
		if err := s.Create(ctx, newRec("many-"+time.Duration(i).String())); err != nil {
			t.Fatal(err)
		}
	}
	if n := entries(); n != maxSummaries {
		t.Fatalf("%d cache entries, want the bound %d", n, maxSummaries)
	}
}

// Not cached: a time in a zone offset by seconds (JSON stores it a few seconds off, so the
// summary would not be the stored one's), a large value, a value a lease operation rewrote.
func TestSummaryCacheSkips(t *testing.T) {
	ctx := context.Background()
	s := openSummaryTest(t)
	now := summaryTestNow
	cached := func(key string) bool {
		s.summaries.mu.Lock()
		defer s.summaries.mu.Unlock()
		_, ok := s.summaries.m[string(scopedKey("", key))]
		return ok
	}
	newRec := pendingRecord

	odd := newRec("odd-zone", []byte(`{}`), now.Add(time.Minute).In(time.FixedZone("odd", 30)))
	if err := s.Create(ctx, odd); err != nil {
		t.Fatal(err)
	}
	if cached("odd-zone") {
		t.Fatal("a lease in a zone offset by 30 s was cached")
	}
	// The update keeps the lease as stored (decoded), whatever instant the caller holds.
	stored, err := s.Get(ctx, "", "odd-zone")
	if err != nil {
		t.Fatal(err)
	}
	odd.Attempts, odd.LeaseUntil = 1, odd.LeaseUntil.UTC()
	if err := s.Update(ctx, odd); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "", "odd-zone"); err != nil || !got.LeaseUntil.Equal(stored.LeaseUntil) {
		t.Fatalf("lease after the update: %v, %v; stored before: %v", got.LeaseUntil, err, stored.LeaseUntil)
	}

	if err := s.Create(ctx, newRec("big", bytes.Repeat([]byte("x"), maxSummaryValue), now.Add(time.Minute))); err != nil {
		t.Fatal(err)
	}
	if cached("big") {
		t.Fatal("a value over maxSummaryValue was cached")
	}

	if err := s.Create(ctx, newRec("claimed", []byte(`{}`), now.Add(time.Minute))); err != nil {
		t.Fatal(err)
	}
	if !cached("claimed") {
		t.Fatal("a plain pending record was not cached")
	}
	if _, err := s.Claim(ctx, "", "claimed", keystore.Lease{Owner: "a", Now: now, Until: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if cached("claimed") {
		t.Fatal("the entry of a value a Claim replaced was kept")
	}
}

var summaryTestNow = time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)

func openSummaryTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "keys.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// pendingRecord is a pending record created at summaryTestNow, owned by "a" with fence 1.
func pendingRecord(key string, body []byte, lease time.Time) *keystore.Record {
	return &keystore.Record{Key: key, Fingerprint: "f", State: keystore.StatePending,
		Request:   keystore.Request{Method: http.MethodPost, URL: "/v1/payments", Body: body},
		CreatedAt: summaryTestNow, UpdatedAt: summaryTestNow, Owner: "a", LeaseUntil: lease, Fence: 1}
}
