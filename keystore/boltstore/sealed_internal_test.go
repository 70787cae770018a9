package boltstore

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
)

// BenchmarkRecordValue measures the CPU cost of the codec alone, without I/O: the value of a
// record with a ~500-byte request and ~300-byte answer made (value) and read back (decode),
// plain and with sealed bodies, in the same run. A durable call makes two values (the
// pending record, the final one) and reads none back on its own path.
func BenchmarkRecordValue(b *testing.B) {
	keys := map[string][]byte{"k1": bytes.Repeat([]byte{1}, 32)}
	ring, err := keystore.NewKeyRing("k1", keys)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	rec := &keystore.Record{Scope: "tenant-42", Key: "7c1e9a52-5d0b-4f8e-9a11-1f3c0d2b4e6a", Intent: "order-42",
		Fingerprint: strings.Repeat("ab", 32), State: keystore.StateSucceeded, CreatedAt: now, UpdatedAt: now,
		Request: keystore.Request{Method: http.MethodPost, URL: "/v1/payments",
			Header: http.Header{"Content-Type": {"application/json"}},
			Body:   []byte(`{"amount":1000,"card":"4242424242424242","d":"` + strings.Repeat("x", 440) + `"}`)},
		Response: &keystore.Response{StatusCode: 201, Body: []byte(`{"id":"pi_1","client_secret":"` + strings.Repeat("s", 260) + `"}`)}}
	k := scopedKey(rec.Scope, rec.Key)
	for _, tc := range []struct {
		name string
		c    *codec
	}{{"plain", &codec{}}, {"sealed", &codec{ring: ring}}} {
		b.Run("op=value/mode="+tc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := tc.c.value(k, rec); err != nil {
					b.Fatal(err)
				}
			}
		})
		v, _ := tc.c.value(k, rec)
		b.Run("op=decode/mode="+tc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := tc.c.decode(k, v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzDecodeValue: whatever bytes a value holds, decoding it returns a record or an error,
// never panics; a value that decodes is one whose checksum matches (any other change of a
// sound value is damage), and a sealed body opens only with its ring.
func FuzzDecodeValue(f *testing.F) {
	ring, _ := keystore.NewKeyRing("k1", map[string][]byte{"k1": bytes.Repeat([]byte{1}, 16)})
	k := scopedKey("t", "k-1")
	rec := &keystore.Record{Scope: "t", Key: "k-1", Intent: "ord-1", State: keystore.StatePending,
		Request: keystore.Request{Method: "POST", URL: "/v1/payments", Body: []byte(`{"amount":1}`)}}
	for _, c := range []*codec{{}, {ring: ring}} {
		v, err := c.value(k, rec)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(v, 0, byte(0))
		f.Add(v, len(v)/2, byte(1))
	}
	f.Fuzz(func(t *testing.T, v []byte, at int, delta byte) {
		c := &codec{ring: ring}
		good, err := c.decode(k, v)
		if err != nil || at < 0 || at >= len(v) || delta == 0 {
			return
		}
		changed := append([]byte(nil), v...)
		changed[at] += delta
		if got, err := c.decode(k, changed); err == nil {
			t.Fatalf("a value with byte %d changed by %d decodes: %+v (was %+v)", at, delta, got, good)
		}
	})
}
