package boltstore

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
)

// The fixtures testdata/v2-plain.db.gz and v2-sealed.db.gz were written by the release before
// schema version 3 (commit 4c0c4bc), with testdata/v2fixture_gen_test.go.txt, from the
// records below (v2-sealed.db with v2FixtureRing).
func v2FixtureRing() *keystore.KeyRing {
	r, err := keystore.NewKeyRing("k2", map[string][]byte{"k1": bytes.Repeat([]byte{1}, 32), "k2": bytes.Repeat([]byte{2}, 32)})
	if err != nil {
		panic(err)
	}
	return r
}

func v2FixtureRecords() []*keystore.Record {
	at := time.Date(2026, 11, 30, 23, 59, 58, 987654321, time.UTC)
	cet := time.FixedZone("CET", 3600)
	nepal := time.FixedZone("NPT", 5*3600+45*60)
	gmt := time.FixedZone("GMT", 0)
	long := bytes.Repeat([]byte("0123456789abcdef"), 1280) // 20 KiB, several pages
	bin := make([]byte, 4096)
	for i := range bin {
		bin[i] = byte(i * 7)
	}
	return []*keystore.Record{
		{Key: "min", State: keystore.StatePending, Request: keystore.Request{Method: "POST"}},
		{Scope: "", Key: "pending-leased", Intent: "order-1", Fingerprint: strings.Repeat("ab", 32),
			Request: keystore.Request{Method: "POST", URL: "/v1/payments?amount=1000&cur=EUR",
				Header: http.Header{"Content-Type": {"application/json"}, "X-Multi": {"a", "b", ""}, "X-Empty": {}, "X-Nil": nil, "Idempotency-Key": {"pending-leased"}},
				Body:   []byte(`{"amount":1000,"currency":"EUR","desc":"caf\u00e9 ☕ 💳"}`)},
			State: keystore.StatePending, Attempts: 2, LastStatusCode: 503, NotExecuted: true, Error: "503 Service Unavailable",
			CreatedAt: at, UpdatedAt: at.Add(time.Second).In(cet), Owner: "host-a/123", LeaseUntil: at.Add(time.Hour).In(nepal), Fence: 3},
		{Scope: "tenant-ü", Key: "manual-1", Intent: "order-ü-2", Fingerprint: "ff",
			Request: keystore.Request{Method: "PUT", URL: "/v1/ünïcode/路径", Header: http.Header{}, Body: long},
			State:   keystore.StateManual, Attempts: 5, LastStatusCode: 500, Reason: "stored-5xx", Error: "500 Internal Server Error",
			Response:  &keystore.Response{StatusCode: 500, Header: http.Header{"Retry-After": {"10"}}, Body: []byte("oops")},
			CreatedAt: at.In(gmt), UpdatedAt: at.Add(2 * time.Minute).In(gmt), Note: "ticket #7 — ✓ checked"},
		{Scope: "tenant-ü", Key: "succeeded-1", Intent: "order-3", Fingerprint: strings.Repeat("0", 64),
			Request: keystore.Request{Method: "POST", URL: "/v1/charges", Header: http.Header{"Accept": {"*/*"}}, Body: bin},
			State:   keystore.StateSucceeded, Attempts: 1, LastStatusCode: 201, Reason: "succeeded",
			Response:  &keystore.Response{StatusCode: 201, Header: http.Header{"Location": {"/v1/charges/ch_1"}, "X-Multi": {"1", "2"}, "X-Nil": nil}, Body: long[:17000]},
			CreatedAt: at.Add(-time.Hour), UpdatedAt: at, Owner: "host-b", Fence: 9},
		{Scope: "s", Key: "failed-1", State: keystore.StateFailed, Request: keystore.Request{Method: "DELETE", Body: []byte{}},
			Attempts: 1, LastStatusCode: 422, Reason: "key_reuse", Error: "422",
			Response: &keystore.Response{StatusCode: 422, Header: http.Header{}, Body: []byte{}}},
		{Scope: "s", Key: "succeeded-empty-resp", State: keystore.StateSucceeded, Request: keystore.Request{Method: "POST"},
			Response: &keystore.Response{StatusCode: 204}, CreatedAt: time.Time{}, UpdatedAt: at.In(cet)},
		{Scope: "s", Key: "pending-unleased-owner", Intent: "i", State: keystore.StatePending, Request: keystore.Request{Method: "POST", Body: []byte("x")},
			Owner: "gone", Fence: 1, CreatedAt: at, UpdatedAt: at},
	}
}

// gunzipFixture copies testdata/name.gz to a temporary file and returns its path.
func gunzipFixture(t *testing.T, name string) string {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name+".gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A file written by the previous release opens with this code; every record reads back as
// that release read it (strictly: reflect.DeepEqual, time zones included), before and after
// each record is rewritten in the binary encoding; the indexes, Verify and the lease
// operations work on it.
func TestV2FixtureReadsBackIdentical(t *testing.T) {
	ctx := context.Background()
	for name, ring := range map[string]*keystore.KeyRing{"v2-plain.db": nil, "v2-sealed.db": v2FixtureRing()} {
		t.Run(name, func(t *testing.T) {
			path := gunzipFixture(t, name)
			recs := v2FixtureRecords()

			ro, err := OpenReadOnly(path, &Options{KeyRing: ring})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				got, err := ro.Get(ctx, r.Scope, r.Key)
				if err != nil {
					t.Fatalf("read-only Get %q: %v", r.Key, err)
				}
				if want := viaJSON(t, r); !reflect.DeepEqual(got, want) {
					t.Errorf("read-only Get %q:\n got %+v\nwant %+v", r.Key, got, want)
				}
			}
			if err := ro.Close(); err != nil {
				t.Fatal(err)
			}

			s, err := Open(path, &Options{KeyRing: ring})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			rep, err := s.Verify(ctx)
			if err != nil || len(rep.Problems) != 0 || rep.Records != len(recs) || rep.Intents != 4 {
				t.Fatalf("Verify of the v2 file = %+v, %v", rep, err)
			}
			before := map[string]*keystore.Record{}
			for _, r := range recs {
				got, err := s.Get(ctx, r.Scope, r.Key)
				if err != nil {
					t.Fatal(err)
				}
				if want := viaJSON(t, r); !reflect.DeepEqual(got, want) {
					t.Errorf("Get %q after Open:\n got %+v\nwant %+v", r.Key, got, want)
				}
				before[r.Key] = got
			}
			// Rewrite every record unchanged: it is now binary and must read back the same.
			// Half way, with JSON and binary records side by side, rebuild the intent index.
			for i, r := range recs {
				if i == len(recs)/2 {
					if n, err := s.RebuildIntentIndex(ctx); err != nil || n != 4 {
						t.Fatalf("RebuildIntentIndex on a mixed file = %d, %v", n, err)
					}
				}
				if err := s.Update(ctx, before[r.Key].Clone()); err != nil {
					t.Fatalf("Update %q: %v", r.Key, err)
				}
			}
			if err := s.view(func(tx *bbolt.Tx) error {
				return tx.Bucket(bucketRecords).ForEach(func(k, v []byte) error {
					if v[crcSize]&flagBinary == 0 {
						t.Errorf("%q still JSON after Update", k)
					}
					return nil
				})
			}); err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				got, err := s.Get(ctx, r.Scope, r.Key)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, before[r.Key]) {
					t.Errorf("Get %q after its binary rewrite:\n got %+v\nwant %+v (as read from JSON)", r.Key, got, before[r.Key])
				}
			}
			for _, in := range []struct{ scope, intent, key string }{{"", "order-1", "pending-leased"}, {"tenant-ü", "order-ü-2", "manual-1"}, {"tenant-ü", "order-3", "succeeded-1"}, {"s", "i", "pending-unleased-owner"}} {
				if got, err := s.GetByIntent(ctx, in.scope, in.intent); err != nil || got.Key != in.key {
					t.Errorf("GetByIntent(%q, %q) = %v, %v", in.scope, in.intent, got, err)
				}
			}
			all, err := s.List(ctx)
			if err != nil || len(all) != len(recs) {
				t.Fatalf("List = %d records, %v", len(all), err)
			}
			now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			claimed, err := s.ClaimExpired(ctx, keystore.Lease{Owner: "new", Now: now.Add(2 * time.Hour), Until: now.Add(3 * time.Hour)}, 10)
			if err != nil || len(claimed) != 3 {
				t.Fatalf("ClaimExpired = %d records, %v; want the 3 pending", len(claimed), err)
			}
			rep, err = s.Verify(ctx)
			if err != nil || len(rep.Problems) != 0 || rep.Records != len(recs) {
				t.Fatalf("Verify after rewrite = %+v, %v", rep, err)
			}
		})
	}
}

// Sealed bodies of the v2 file: without the ring, or with a ring lacking the key they were
// sealed with, or with a wrong key under their id, Get fails with the key ring's errors;
// never a record with a sealed box for a body.
func TestV2FixtureSealedWithoutKey(t *testing.T) {
	ctx := context.Background()
	path := gunzipFixture(t, "v2-sealed.db")
	old, err := keystore.NewKeyRing("k1", map[string][]byte{"k1": bytes.Repeat([]byte{1}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := keystore.NewKeyRing("k2", map[string][]byte{"k2": bytes.Repeat([]byte{9}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		ring *keystore.KeyRing
		want error
	}{{"no ring", nil, keystore.ErrKeyUnknown}, {"old key only", old, keystore.ErrKeyUnknown}, {"wrong key", wrong, keystore.ErrKeyWrong}} {
		s, err := OpenReadOnly(path, &Options{KeyRing: c.ring})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range v2FixtureRecords() {
			got, err := s.Get(ctx, r.Scope, r.Key)
			if len(r.Request.Body) == 0 && (r.Response == nil || len(r.Response.Body) == 0) {
				if err != nil {
					t.Errorf("%s: %q has no body to open: %v", c.name, r.Key, err)
				}
				continue
			}
			if !errors.Is(err, c.want) {
				t.Errorf("%s: Get %q = %v, %v; want %v", c.name, r.Key, got, err, c.want)
			}
		}
		s.Close()
	}
}
