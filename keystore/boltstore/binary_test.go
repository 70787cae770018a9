package boltstore

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
)

// legacyValue is the value schema version 2 wrote for rec under k: checksum, flags and the
// JSON of rec with its bodies sealed if c has a ring.
func legacyValue(t testing.TB, c *codec, k []byte, rec *keystore.Record) []byte {
	t.Helper()
	flags := byte(0)
	if c.ring != nil {
		flags = flagSealed
		sealed := *rec
		var err error
		if sealed.Request.Body, err = c.sealBody(k, "request", rec.Request.Body); err != nil {
			t.Fatal(err)
		}
		if rec.Response != nil {
			resp := *rec.Response
			if resp.Body, err = c.sealBody(k, "response", resp.Body); err != nil {
				t.Fatal(err)
			}
			sealed.Response = &resp
		}
		rec = &sealed
	}
	j, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	return seal(k, []byte{flags}, j)
}

// codecRecords covers every field and the shapes the JSON decoder gives back differently
// from what was written (empty bodies and headers, nil and empty header lists).
func codecRecords() []*keystore.Record {
	at := time.Date(2026, 12, 1, 13, 4, 5, 123456789, time.UTC)
	return []*keystore.Record{
		{Key: "k-min", State: keystore.StatePending, Request: keystore.Request{Method: http.MethodPost}},
		{Scope: "tenant", Key: "k-pending", Intent: "order-1", Fingerprint: strings.Repeat("ab", 32),
			Request: keystore.Request{Method: http.MethodPost, URL: "/v1/payments?x=1",
				Header: http.Header{"Content-Type": {"application/json"}, "X-Empty": {}, "X-Nil": nil, "X-Two": {"a", ""}},
				Body:   []byte(`{"amount":1000}`)},
			State: keystore.StatePending, Attempts: 1, NotExecuted: true, CreatedAt: at, UpdatedAt: at.Add(time.Second),
			Owner: "host-1", LeaseUntil: at.Add(time.Minute), Fence: 1},
		{Scope: "tenant", Key: "k-done", Fingerprint: "f", State: keystore.StateSucceeded,
			Request:  keystore.Request{Method: http.MethodPut, URL: "/v1/x", Header: http.Header{}, Body: []byte{}},
			Attempts: 3, LastStatusCode: 201, Reason: "succeeded", Error: "",
			Response:  &keystore.Response{StatusCode: 201, Header: http.Header{"Location": {"/v1/x/1"}}, Body: []byte("\x00\xffbinary")},
			CreatedAt: at.In(time.FixedZone("", -3*3600)), UpdatedAt: at.In(time.FixedZone("IST", 5*3600+1800)),
			Fence: 7, Note: "ticket 42 — checked ✓"},
		{Key: "k-failed", State: keystore.StateFailed, Request: keystore.Request{Method: http.MethodPost},
			Attempts: -1, LastStatusCode: 401, Error: "unauthorized", Response: &keystore.Response{StatusCode: 401},
			CreatedAt: at.Local(), UpdatedAt: time.Now()},
		{Key: "k-manual", State: keystore.StateManual, Request: keystore.Request{Method: http.MethodPost},
			Reason: "stored-5xx", CreatedAt: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)},
	}
}

// sameRecord reports whether a and b hold the same values: times the same instant in the
// same zone offset, everything else deeply equal.
func sameRecord(a, b *keystore.Record) bool {
	times := func(r *keystore.Record) ([3]time.Time, *keystore.Record) {
		c := r.Clone()
		ts := [3]time.Time{c.CreatedAt, c.UpdatedAt, c.LeaseUntil}
		c.CreatedAt, c.UpdatedAt, c.LeaseUntil = time.Time{}, time.Time{}, time.Time{}
		return ts, c
	}
	ta, ca := times(a)
	tb, cb := times(b)
	for i := range ta {
		_, oa := ta[i].Zone()
		_, ob := tb[i].Zone()
		if !ta[i].Equal(tb[i]) || oa != ob || ta[i].IsZero() != tb[i].IsZero() {
			return false
		}
	}
	return reflect.DeepEqual(ca, cb)
}

// A record reads back from the binary encoding exactly as from the JSON that version 2
// wrote, plain and sealed: what Get returns does not depend on which encoding the file holds.
func TestBinaryReadsAsJSON(t *testing.T) {
	ring, err := keystore.NewKeyRing("k1", map[string][]byte{"k1": bytes.Repeat([]byte{7}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*codec{{}, {ring: ring}} {
		for _, rec := range codecRecords() {
			k := scopedKey(rec.Scope, rec.Key)
			v, err := c.value(k, rec)
			if err != nil {
				t.Fatal(err)
			}
			if v[crcSize]&flagBinary == 0 {
				t.Fatalf("%s: value written without the binary flag", rec.Key)
			}
			got, err := c.decode(k, v)
			if err != nil {
				t.Fatalf("%s: %v", rec.Key, err)
			}
			want, err := c.decode(k, legacyValue(t, c, k, rec))
			if err != nil {
				t.Fatalf("%s: legacy: %v", rec.Key, err)
			}
			if !sameRecord(got, want) {
				t.Fatalf("%s (sealed %v): binary decodes to\n%+v\nJSON to\n%+v", rec.Key, c.ring != nil, got, want)
			}
			sum, err := decodeSummary(k, v)
			if err != nil {
				t.Fatal(err)
			}
			if !sameRecord(sum, summaryFields(got)) {
				t.Fatalf("%s: summary %+v, want %+v", rec.Key, sum, summaryFields(got))
			}
			// Every shorter value is refused, whatever its checksum.
			for n := crcSize + 1; n < len(v); n++ {
				short := append([]byte(nil), v[:n]...)
				binaryPutSum(k, short)
				if r, err := c.decode(k, short); err == nil {
					t.Fatalf("%s: value cut to %d of %d bytes decodes: %+v", rec.Key, n, len(v), r)
				}
			}
		}
	}
}

func binaryPutSum(k, v []byte) {
	s := entrySum(k, v[crcSize:])
	v[0], v[1], v[2], v[3] = byte(s>>24), byte(s>>16), byte(s>>8), byte(s)
}

// A file written by version 2 (JSON records, plain and sealed) opens and reads; Open raises
// its schema version to 3, and a record rewritten since is binary. A read-only open reads it
// without changing it.
func TestVersion2FileOpens(t *testing.T) {
	ctx := context.Background()
	ring, err := keystore.NewKeyRing("k1", map[string][]byte{"k1": bytes.Repeat([]byte{7}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	for name, kr := range map[string]*keystore.KeyRing{"plain": nil, "sealed": ring} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "keys.db")
			recs := codecRecords()
			s, err := Open(path, &Options{KeyRing: kr})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				if err := s.Create(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			schema := func(db *bbolt.DB) (v string) {
				_ = db.View(func(tx *bbolt.Tx) error { v = string(tx.Bucket(bucketMeta).Get(keySchema)); return nil })
				return v
			}
			db, err := bbolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			c := &codec{ring: kr}
			if err := db.Update(func(tx *bbolt.Tx) error {
				for _, r := range recs {
					k := scopedKey(r.Scope, r.Key)
					if err := tx.Bucket(bucketRecords).Put(k, legacyValue(t, c, k, keystore.StoredCopy(r))); err != nil {
						return err
					}
				}
				return tx.Bucket(bucketMeta).Put(keySchema, []byte("2"))
			}); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}

			ro, err := OpenReadOnly(path, &Options{KeyRing: kr})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				got, err := ro.Get(ctx, r.Scope, r.Key)
				if err != nil {
					t.Fatal(err)
				}
				if !sameRecord(got, viaJSON(t, r)) {
					t.Fatalf("read-only Get %+v, want %+v", got, r)
				}
			}
			if err := ro.Close(); err != nil {
				t.Fatal(err)
			}

			s, err = Open(path, &Options{KeyRing: kr})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				got, err := s.Get(ctx, r.Scope, r.Key)
				if err != nil {
					t.Fatal(err)
				}
				if !sameRecord(got, viaJSON(t, r)) {
					t.Fatalf("Get %+v, want %+v", got, r)
				}
			}
			if got, err := s.GetByIntent(ctx, "tenant", "order-1"); err != nil || got.Key != "k-pending" {
				t.Fatalf("GetByIntent = %v, %v", got, err)
			}
			next := recs[1].Clone()
			next.State, next.Attempts = keystore.StateSucceeded, 2
			next.Response = &keystore.Response{StatusCode: 201, Body: []byte(`{"id":"p_1"}`)}
			if err := s.Update(ctx, next); err != nil {
				t.Fatal(err)
			}
			if err := s.view(func(tx *bbolt.Tx) error {
				if v := schema(s.db); v != "3" {
					t.Errorf("schema version %q after Open, want 3", v)
				}
				if v := tx.Bucket(bucketRecords).Get(scopedKey("tenant", "k-pending")); v[crcSize]&flagBinary == 0 {
					t.Error("the updated record is still JSON")
				}
				if v := tx.Bucket(bucketRecords).Get(scopedKey("tenant", "k-done")); v[crcSize]&flagBinary != 0 {
					t.Error("a record not written since was rewritten")
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			got, err := s.Get(ctx, "tenant", "k-pending")
			if err != nil || !sameRecord(got, viaJSON(t, next)) {
				t.Fatalf("Get after Update = %+v, %v; want %+v", got, err, next)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// FuzzDecodeBinary: whatever bytes follow the flags byte, the binary decoder returns a record
// or an error, never panics; a record it returns encodes and decodes back to itself, and its
// summary decodes to the same fields.
func FuzzDecodeBinary(f *testing.F) {
	for _, r := range codecRecords() {
		b, err := appendBinary(nil, r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte{binaryVersion})
	f.Add([]byte{binaryVersion + 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := decodeBinary(b, false)
		sum, serr := decodeBinary(b, true)
		if err != nil {
			return
		}
		if serr != nil {
			t.Fatalf("the record decodes, its summary does not: %v", serr)
		}
		if !sameRecord(sum, summaryFields(rec)) {
			t.Fatalf("summary %+v, record %+v", sum, rec)
		}
		again, err := appendBinary(nil, rec)
		if err != nil {
			return // a time the encoder refuses (MarshalBinary's range), read from crafted bytes
		}
		back, err := decodeBinary(again, false)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if !sameRecord(back, rec) {
			t.Fatalf("round trip changed the record:\n%+v\n%+v", rec, back)
		}
	})
}

// viaJSON is the stored copy of r as version 2 read it back: through JSON.
func viaJSON(t *testing.T, r *keystore.Record) *keystore.Record {
	j, err := json.Marshal(keystore.StoredCopy(r))
	if err != nil {
		t.Fatal(err)
	}
	var out keystore.Record
	if err := json.Unmarshal(j, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// summaryFields is rec cut to what decodeBinary keeps for a summary.
func summaryFields(rec *keystore.Record) *keystore.Record {
	s := rec.Clone()
	s.Request.Header, s.Request.Body, s.Response = nil, nil, nil
	return s
}
