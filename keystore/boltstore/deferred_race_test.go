package boltstore_test

import (
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// Callers reuse their record's memory while the store still holds the write: a goroutine
// rewrites the header maps, value lists and bodies of records just handed to UpdateDeferred
// while others read them through the overlay (Get, List) and commits run. Under -race this
// shows whether the store kept any of the caller's memory; every read must see the version
// as handed over.
func TestDeferredCallerReusesMemoryConcurrently(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	s := open(t, path, &boltstore.Options{FlushDelay: time.Millisecond, KeyRing: ring(t, "k1", "k1")})
	defer s.Close()
	const n = 40
	recs := make([]*keystore.Record, n)
	for i := range recs {
		recs[i] = record("t", "k"+string(rune('A'+i)))
		if err := s.Create(bg, recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i, rec := range recs {
		next := rec.Clone()
		next.State, next.Attempts = keystore.StateSucceeded, 1
		next.Response = &keystore.Response{StatusCode: 201, Body: []byte("answer"),
			Header: http.Header{"Request-Id": {"r"}, "Set-Cookie": {"sid"}}}
		if err := s.UpdateDeferred(bg, next); err != nil {
			t.Fatal(err)
		}
		wg.Add(2)
		go func() { // the caller reuses its memory
			defer wg.Done()
			for range 50 {
				next.Request.Body[0]++
				next.Response.Body[0]++
				next.Request.Header["Content-Type"][0] = "x"
				next.Response.Header["Request-Id"][0] = "y"
				next.Response.Header["Authorization"] = []string{"Bearer sk"}
			}
		}()
		go func() {
			defer wg.Done()
			for range 20 {
				got, err := s.Get(bg, "t", rec.Key)
				if err != nil {
					t.Error(err)
					return
				}
				if string(got.Response.Body) != "answer" || got.Request.Header.Get("Content-Type") != "application/json" ||
					got.Response.Header.Get("Request-Id") != "r" || len(got.Response.Header) != 1 ||
					string(got.Request.Body) != string(recs[i].Request.Body) {
					t.Errorf("%s: read %+v %+v", rec.Key, got, got.Response)
					return
				}
				if _, err := s.List(bg, keystore.StatePending); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
