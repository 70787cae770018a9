package boltstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
)

// RebuildIntentIndex deletes and recreates the "unleased" and "leased" buckets inside its
// commit. A write queued after it in the same commit must delete its index entry through the
// live bucket, not through a cursor the commit made on the deleted one (txcursor.go checks the
// cursor's bucket): bbolt's deleted bucket has no nodes map, the delete panicked, the panic
// was taken for page damage, the whole batch (the rebuild and both updates) rolled back and
// the healthy store refused every later write. The rebuild is the repair tool: running it
// while the store serves calls must neither brick the store nor lose the calls' final writes.
func TestCursorSurvivesIndexRebuildInTheSameCommit(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	recs := make([]*keystore.Record, 3)
	for i := range recs {
		recs[i] = &keystore.Record{Key: fmt.Sprintf("k%d", i), Intent: fmt.Sprintf("i%d", i),
			State: keystore.StatePending, Request: keystore.Request{Method: "POST", URL: "https://x/p"},
			CreatedAt: at.Add(time.Duration(i) * time.Second), UpdatedAt: at}
		if err := s.Create(ctx, recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	succeed := func(r *keystore.Record) *keystore.Record {
		n := r.Clone()
		n.State, n.Attempts, n.LastStatusCode = keystore.StateSucceeded, 1, 201
		n.Response = &keystore.Response{StatusCode: 201, Body: []byte(`{"id":"p"}`)}
		return n
	}
	release := holdLeader(t, s)
	errs := make(chan error, 3)
	go func() { errs <- s.Update(ctx, succeed(recs[0])) }() // deletes k0's "unleased" entry: cursor made
	waitQueued(t, s, 1)
	var rebuilt int
	go func() { var err error; rebuilt, err = s.RebuildIntentIndex(ctx); errs <- err }()
	waitQueued(t, s, 2)
	go func() { errs <- s.Update(ctx, succeed(recs[1])) }() // deletes k1's entry from the new bucket
	waitQueued(t, s, 3)
	if err := release(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Errorf("a write of the batch failed: %v", err)
		}
	}
	if rebuilt != 3 {
		t.Errorf("RebuildIntentIndex indexed %d intents, want 3", rebuilt)
	}
	for i, want := range []keystore.State{keystore.StateSucceeded, keystore.StateSucceeded, keystore.StatePending} {
		got, err := s.Get(ctx, "", recs[i].Key)
		if err != nil || got.State != want {
			t.Errorf("Get(%s) = %v, %v; want state %s", recs[i].Key, got, err, want)
		}
	}
	if err := s.Create(ctx, &keystore.Record{Key: "later", State: keystore.StatePending,
		Request: keystore.Request{Method: "POST"}, CreatedAt: at, UpdatedAt: at}); err != nil {
		t.Errorf("a write after the batch: %v (a healthy store refuses writes)", err)
	}
	// Only k2 and later are left pending: ClaimExpired must find them and nothing else.
	l := keystore.Lease{Owner: "o", Now: at.Add(time.Hour), Until: at.Add(2 * time.Hour)}
	claimed, err := s.ClaimExpired(ctx, l, 10)
	if err != nil && !errors.Is(err, keystore.ErrClosed) {
		t.Fatalf("ClaimExpired: %v", err)
	}
	var keys []string
	for _, r := range claimed {
		keys = append(keys, r.Key)
	}
	if fmt.Sprint(keys) != "[later k2]" { // oldest CreatedAt first
		t.Errorf("ClaimExpired claimed %v, want [later k2]", keys)
	}
}
