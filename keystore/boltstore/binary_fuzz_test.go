package boltstore

import (
	"bytes"
	"errors"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
)

func v3Ring(tb testing.TB) *keystore.KeyRing {
	r, err := keystore.NewKeyRing("k1", map[string][]byte{"k1": bytes.Repeat([]byte{7}, 32)})
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// FuzzDecodeValueAnyFlags: a whole record value (checksum made valid, any flags, any bytes) under
// any key, decoded with and without a ring, as summary, and as damage: never a panic; a record
// returned is valid and names its key; the summary agrees with the record.
func FuzzDecodeValueAnyFlags(f *testing.F) {
	ring := v3Ring(f)
	for _, c := range []*codec{{}, {ring: ring}} {
		for _, r := range codecRecords() {
			k := scopedKey(r.Scope, r.Key)
			v, err := c.value(k, r)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(k, v[crcSize:])
			f.Add(k, legacyValue(f, c, k, r)[crcSize:])
		}
	}
	f.Fuzz(func(t *testing.T, k, rest []byte) {
		v := seal(k, rest)
		_ = parseDamaged(v)
		for _, c := range []*codec{{}, {ring: ring}} {
			rec, err := c.decode(k, v)
			sum, serr := decodeSummary(k, v)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) && !errors.Is(err, keystore.ErrKeyUnknown) && !errors.Is(err, keystore.ErrKeyWrong) {
					t.Fatalf("decode error not ErrCorrupt/ErrKey*: %v", err)
				}
				continue
			}
			if rec.Validate() != nil || string(scopedKey(rec.Scope, rec.Key)) != string(k) {
				t.Fatalf("decoded an invalid record or one of another key: %+v", rec)
			}
			if serr != nil {
				t.Fatalf("record decodes, summary does not: %v", serr)
			}
			if !sameRecord(summaryOf(sum), summaryOf(rec)) {
				t.Fatalf("summary %+v, record %+v", sum, rec)
			}
		}
	})
}

// FuzzBinaryRoundTrip: any record Create would accept (valid, UTF-8) is either refused by the
// encoder with ErrInvalid or decodes back to the same record.
func FuzzBinaryRoundTrip(f *testing.F) {
	f.Add("s", "k", "i", "POST", "/x", "X-A", "v", []byte("body"), uint8(1), int64(1), int64(200), int64(1700000000), int64(5), int32(3600), "own", int64(3), true, []byte("resp"))
	f.Add("", "k", "", "GET", "", "", "", []byte(nil), uint8(4), int64(-1), int64(0), int64(0), int64(0), int32(0), "", int64(0), false, []byte(nil))
	ring := v3Ring(f)
	f.Fuzz(func(t *testing.T, scope, key, intent, method, url, hname, hval string, body []byte, state uint8, attempts, status, sec, nsec int64, off int32, owner string, fence int64, withResp bool, rbody []byte) {
		states := []keystore.State{keystore.StatePending, keystore.StateSucceeded, keystore.StateFailed, keystore.StateManual}
		// Known findings, each with its own test (adv_binary_test.go): a negative offset that
		// is not whole minutes, and counts beyond 32 bits.
		o := int(off % (18 * 3600))
		if o < 0 && o%60 != 0 {
			o -= o % 60
		}
		attempts, status = int64(int32(attempts)), int64(int32(status))
		zone := time.FixedZone("", o)
		at := time.Unix(sec, nsec).In(zone)
		rec := &keystore.Record{Scope: scope, Key: key, Intent: intent, Fingerprint: "f",
			Request: keystore.Request{Method: method, URL: url, Body: body},
			State:   states[int(state)%len(states)], Attempts: int(attempts), LastStatusCode: int(status),
			CreatedAt: at, UpdatedAt: at.Add(time.Second), Owner: owner, Fence: fence}
		if hname != "" {
			rec.Request.Header = http.Header{hname: {hval, hval}}
		}
		if owner != "" {
			rec.LeaseUntil = at.Add(time.Minute)
		}
		if withResp {
			rec.Response = &keystore.Response{StatusCode: int(status), Body: rbody, Header: http.Header{"A": {hval}}}
		}
		for _, c := range []*codec{{}, {ring: ring}} {
			e, err := encode(rec, nil, c)
			if err != nil {
				if !errors.Is(err, keystore.ErrInvalid) {
					t.Fatalf("encode: %v", err)
				}
				return
			}
			stored := keystore.StoredCopy(rec)
			got, err := c.decode(e.key, e.value)
			if err != nil {
				t.Fatalf("Create would store %+v, which then does not decode: %v", stored, err)
			}
			if !sameRecord(got, stored) {
				t.Fatalf("round trip changed the record:\n%+v\n%+v", stored, got)
			}
			if got.Response != nil && !reflect.DeepEqual(got.Response.Header, stored.Response.Header) {
				t.Fatalf("response header %v, want %v", got.Response.Header, stored.Response.Header)
			}
			var fields encoded // what a commit checks (e.rec): the stored record's fields
			fields.setFields(got)
			if !sameRecord(fields.rec, e.rec) {
				t.Fatalf("commit fields %+v, want %+v", e.rec, fields.rec)
			}
			if c.ring == nil {
				if want, err := c.value(e.key, stored); err != nil || !bytes.Equal(want, e.value) {
					t.Fatalf("encode made %x, the stored copy encodes to %x (%v)", e.value, want, err)
				}
			}
		}
	})
}
