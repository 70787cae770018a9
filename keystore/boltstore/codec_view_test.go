package boltstore

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"net/http"
	"reflect"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
)

// The view that Create and Update encode (storedView) must give the bytes the deep stored copy
// (keystore.StoredCopy) gives, leave the caller's record as it was, and carry no secret header
// in any spelling.
func TestStoredViewEncodesAsStoredCopy(t *testing.T) {
	at := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	base := func() *keystore.Record {
		return &keystore.Record{Scope: "s", Key: "k", Intent: "i", Fingerprint: "f",
			Request: keystore.Request{Method: "POST", URL: "https://api.example/v1/pay", Body: []byte(`{"amount":1}`)},
			State:   keystore.StatePending, CreatedAt: at, UpdatedAt: at, Owner: "o", LeaseUntil: at.Add(time.Minute), Fence: 1}
	}
	cases := []struct {
		name      string
		secret    []string
		req, resp http.Header
		kept      []string // request header names the view keeps
	}{
		{name: "no headers"},
		{name: "no secrets", req: http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {"k"}},
			kept: []string{"Content-Type", "Idempotency-Key"}},
		{name: "credentials", req: http.Header{"Authorization": {"Bearer sk"}, "Cookie": {"c=1"},
			"Proxy-Authorization": {"Basic x"}, "Content-Type": {"application/json"}}, kept: []string{"Content-Type"}},
		{name: "non-canonical spellings", req: http.Header{"authorization": {"Bearer sk"}, "COOKIE": {"c"},
			"X-Api-Key": {"key"}}, secret: []string{"x-api-key"}},
		{name: "only secrets", req: http.Header{"Authorization": {"Bearer sk"}}},
		{name: "nil and empty lists", req: http.Header{"A": nil, "B": {}, "Authorization": nil}, kept: []string{"A", "B"}},
		{name: "response secrets", req: http.Header{"X-Sig": {"s"}}, secret: []string{"X-Sig"},
			resp: http.Header{"Set-Cookie": {"sid=1"}, "x-sig": {"t"}, "Request-Id": {"r"}}},
		{name: "response without secrets", resp: http.Header{"Request-Id": {"r"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := base()
			rec.Request.Header = tc.req
			if tc.resp != nil {
				rec.State, rec.LastStatusCode = keystore.StateSucceeded, 201
				rec.Response = &keystore.Response{StatusCode: 201, Header: tc.resp, Body: []byte(`{"id":"p"}`)}
			}
			before := rec.Clone()
			view, err := encode(rec, tc.secret, &codec{})
			if err != nil {
				t.Fatal(err)
			}
			owned, err := (&codec{}).value(view.key, keystore.StoredCopy(rec, tc.secret...))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(view.value, owned) {
				t.Fatalf("view encodes to %x, the stored copy to %x", view.value, owned)
			}
			if !reflect.DeepEqual(rec, before) {
				t.Fatalf("encode changed the caller's record:\n%+v\nwant\n%+v", rec, before)
			}
			got, err := (&codec{}).decode(view.key, view.value)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for k := range got.Request.Header {
				names = append(names, k)
			}
			if len(names) != len(tc.kept) {
				t.Fatalf("stored request headers %v, want %v", names, tc.kept)
			}
			for _, k := range tc.kept {
				if _, ok := got.Request.Header[k]; !ok {
					t.Fatalf("stored record lost request header %q: %v", k, names)
				}
			}
			for _, h := range []http.Header{got.Request.Header, responseHeader(got)} {
				for k := range h {
					if keystore.SecretHeader(k, tc.secret, keystore.ResponseSecretHeaders) {
						t.Fatalf("stored record carries secret header %q", k)
					}
				}
			}
		})
	}
}

func responseHeader(r *keystore.Record) http.Header {
	if r.Response == nil {
		return nil
	}
	return r.Response.Header
}

// entrySum feeds the key's length to the CRC byte by byte; it must equal the checksum of the
// uvarint written out, for lengths of one, two and three uvarint bytes.
func TestEntrySumMatchesUvarintPrefix(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 300, 16383, 16384, bbolt.MaxKeySize} {
		k := bytes.Repeat([]byte{'k'}, n)
		rest := []byte("value")
		want := crc32.Update(0, castagnoli, binary.AppendUvarint(nil, uint64(n)))
		want = crc32.Update(want, castagnoli, k)
		want = crc32.Update(want, castagnoli, rest)
		if got := entrySum(k, rest); got != want {
			t.Fatalf("entrySum of a %d-byte key = %08x, want %08x", n, got, want)
		}
	}
}

// binarySize bounds the encoding from above, at every uvarint length boundary, and closely
// enough that a value is not allocated at twice its size.
func TestBinarySizeBound(t *testing.T) {
	at := time.Date(2026, 12, 5, 8, 0, 0, 1, time.FixedZone("", -(13*3600+59*60+59)))
	for _, n := range []int{0, 1, 127, 128, 16383, 16384, 70000} {
		s := string(bytes.Repeat([]byte{'x'}, n))
		rec := &keystore.Record{Scope: s, Key: "k" + s, Fingerprint: s, Owner: "o", Fence: -1 << 62,
			Request: keystore.Request{Method: "POST", URL: s, Body: []byte(s), Header: http.Header{s + "A": {s, ""}, "B": nil}},
			State:   keystore.StateSucceeded, Attempts: 1 << 40, LastStatusCode: -1 << 40, Reason: s, Error: s, Note: s,
			Response:  &keystore.Response{StatusCode: 599, Body: []byte(s), Header: http.Header{"C": {s}}},
			CreatedAt: at, UpdatedAt: at, LeaseUntil: at.AddDate(7000, 0, 0)}
		b, err := appendBinary(nil, rec)
		if err != nil {
			t.Fatal(err)
		}
		if size := binarySize(rec); len(b) > size || size-len(b) > 100 {
			t.Fatalf("strings of %d bytes: encoding of %d bytes, binarySize %d", n, len(b), size)
		}
	}
}
