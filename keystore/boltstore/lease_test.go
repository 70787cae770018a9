package boltstore_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
)

// TestLeaseSurvivesReopen: a claim is durable like any write, so the fencing token still
// refuses the stale owner after the file is closed and opened again (a restarted process).
func TestLeaseSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keys.db")
	now := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	s := open(t, path, nil)
	rec := &keystore.Record{Scope: "t", Key: "k", Fingerprint: "f", State: keystore.StatePending,
		Request: keystore.Request{Method: http.MethodPost, URL: "/v1/payments"}, CreatedAt: now, UpdatedAt: now}
	if err := s.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	old, err := s.Claim(ctx, "t", "k", keystore.Lease{Owner: "before", Now: now, Until: now.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	taken, err := s.Claim(ctx, "t", "k", keystore.Lease{Owner: "other", Now: now.Add(time.Second), Until: now.Add(time.Hour)})
	if err != nil || taken.Fence != 2 {
		t.Fatalf("takeover: fence %v, %v", taken, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path, nil)
	defer s.Close()
	got, err := s.Get(ctx, "t", "k")
	if err != nil || got.Owner != "other" || got.Fence != 2 || !got.LeaseUntil.Equal(now.Add(time.Hour)) {
		t.Fatalf("after reopen: %+v, %v", got, err)
	}
	done := old.Clone()
	done.State = keystore.StateSucceeded
	if err := s.Update(ctx, done); !errors.Is(err, keystore.ErrFenced) {
		t.Fatalf("stale owner's Update after reopen: %v, want ErrFenced", err)
	}
	if _, err := s.Claim(ctx, "t", "k", keystore.Lease{Owner: "before", Now: now.Add(2 * time.Second), Until: now.Add(time.Minute)}); !errors.Is(err, keystore.ErrClaimed) {
		t.Fatalf("Claim of the live lease after reopen: %v, want ErrClaimed", err)
	}
}
