package boltstore_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// A deferred write is visible from the moment UpdateDeferred returns, also to a read whose
// transaction began just before the commit that carries it and that checks the overlay just
// after that commit settled it.
func TestDeferredWritesStayVisibleAcrossTheirCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	s := open(t, path, &boltstore.Options{FlushDelay: time.Millisecond})
	const n = 150
	for round := range 4 {
		for i := range n {
			rec := record("t", fmt.Sprintf("r%d-%03d", round, i))
			if err := s.Create(bg, rec); err != nil {
				t.Fatal(err)
			}
			rec.State = keystore.StateSucceeded
			if err := s.UpdateDeferred(bg, rec); err != nil {
				t.Fatal(err)
			}
		}
		for range 20 { // the flushes run meanwhile
			left, err := s.List(bg, keystore.StatePending)
			if err != nil || len(left) != 0 {
				t.Fatalf("round %d: List(pending) = %d records, %v; want 0", round, len(left), err)
			}
			page, err := s.ListPage(bg, []keystore.State{keystore.StatePending}, "", 10*n)
			if err != nil || len(page.Records) != 0 {
				t.Fatalf("round %d: ListPage(pending) = %d records, %v; want 0", round, len(page.Records), err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path, nil)
	left, err := s.List(bg, keystore.StatePending)
	if err != nil || len(left) != 0 {
		t.Fatalf("after Close and Open: %d pending, %v; want every deferred write committed", len(left), err)
	}
}

// A deferred write keeps nothing of the caller's record: changing the record after
// UpdateDeferred returns changes neither what reads see before the commit nor what the
// commit writes. The stored version carries no secret header, keeps the stored lease when the
// update names another (the value is made again inside the commit), and reads back whole,
// headers and bodies, sealed or not.
func TestDeferredWriteOwnsItsVersion(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts boltstore.Options
	}{{"plain", boltstore.Options{}}, {"sealed", boltstore.Options{KeyRing: ring(t, "k1", "k1")}}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "keys.db")
			opts := tc.opts
			opts.FlushDelay = time.Hour // only Close commits the deferred write
			s := open(t, path, &opts)
			rec := record("t", "k")
			rec.Request.Header.Set("Authorization", "Bearer sk_live")
			rec.Owner, rec.LeaseUntil, rec.Fence = "o1", rec.CreatedAt.Add(time.Minute), 1
			if err := s.Create(bg, rec); err != nil {
				t.Fatal(err)
			}
			next := rec.Clone()
			next.State, next.Attempts, next.LastStatusCode = keystore.StateSucceeded, 1, 201
			next.LeaseUntil = rec.LeaseUntil.Add(time.Hour) // Update keeps the stored lease
			next.Response = &keystore.Response{StatusCode: 201, Body: []byte(`{"id":"pay_1"}`),
				Header: http.Header{"Set-Cookie": {"sid=1"}, "Request-Id": {"req_1"}}}
			if err := s.UpdateDeferred(bg, next); err != nil {
				t.Fatal(err)
			}
			want := next.Clone()
			want.Request.Header.Del("Authorization")
			want.Response.Header.Del("Set-Cookie")
			// The caller reuses its record's memory.
			next.Request.Body[0], next.Response.Body[0] = 'X', 'X'
			next.Request.Header["Content-Type"][0] = "text/plain"
			next.Response.Header["Request-Id"][0] = "req_2"
			next.Response.Header.Set("X-Later", "1")
			next.State = keystore.StateFailed

			check := func(when string, got *keystore.Record, lease time.Time) {
				t.Helper()
				if got.State != keystore.StateSucceeded || got.Attempts != 1 || got.LastStatusCode != 201 ||
					string(got.Request.Body) != string(want.Request.Body) || string(got.Response.Body) != string(want.Response.Body) ||
					!reflect.DeepEqual(got.Request.Header, want.Request.Header) || !reflect.DeepEqual(got.Response.Header, want.Response.Header) ||
					!got.LeaseUntil.Equal(lease) || got.Owner != "o1" || got.Fence != 1 {
					t.Fatalf("%s: got\n%+v %+v\nwant\n%+v %+v (lease until %v)", when, got, got.Response, want, want.Response, lease)
				}
			}
			got, err := s.Get(bg, "t", "k")
			if err != nil {
				t.Fatal(err)
			}
			check("before the commit", got, want.LeaseUntil) // as written by the caller
			if got.CreatedAt.Location() != rec.CreatedAt.Location() || got.LeaseUntil.Location() != rec.CreatedAt.Location() {
				t.Fatalf("before the commit: times in %v and %v, want the caller's %v", got.CreatedAt.Location(), got.LeaseUntil.Location(), rec.CreatedAt.Location())
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = open(t, path, &tc.opts)
			if got, err = s.Get(bg, "t", "k"); err != nil {
				t.Fatal(err)
			}
			check("committed", got, rec.LeaseUntil)
		})
	}
}
