package boltstore

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
)

func v3Open(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "keys.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// A count or status beyond 32 bits, which Create accepts (Validate does not bound it), reads
// back as written: the decoder once refused it, so a record the store had acknowledged as
// durable read back as ErrCorrupt. Version 2 (JSON) read it back too.
func TestBinaryCountsBeyond32Bits(t *testing.T) {
	if strconv.IntSize < 64 {
		t.Skip("int is 32 bits")
	}
	ctx := context.Background()
	big := 1 << 31
	for name, mut := range map[string]func(r *keystore.Record){
		"attempts":        func(r *keystore.Record) { r.Attempts = big },
		"last status":     func(r *keystore.Record) { r.LastStatusCode = big },
		"response status": func(r *keystore.Record) { r.Response = &keystore.Response{StatusCode: big} },
		"negative":        func(r *keystore.Record) { r.Attempts = -big - 1 },
	} {
		t.Run(name, func(t *testing.T) {
			s := v3Open(t)
			rec := &keystore.Record{Key: "k", State: keystore.StateSucceeded, Request: keystore.Request{Method: "POST"}}
			mut(rec)
			if err := s.Create(ctx, rec); err != nil {
				if !errors.Is(err, keystore.ErrInvalid) {
					t.Fatalf("Create = %v, want nil or ErrInvalid", err)
				}
				return
			}
			got, err := s.Get(ctx, "", "k")
			if err != nil {
				t.Fatalf("Create accepted the record, Get = %v", err)
			}
			if !sameRecord(got, rec) {
				t.Fatalf("Get = %+v, want %+v", got, rec)
			}
		})
	}
}

// A time in a zone offset west of UTC by a non-whole number of minutes (local mean time, a
// caller's FixedZone, a TZ setting with seconds) reads back with its offset and is claimed.
// Encoded with time.Time.MarshalBinary, whose decoder reads the seconds of such an offset as
// unsigned (-9 s came back as +247 s), the record changed and the pending index, keyed by
// the instant of CreatedAt as stored (storedInstant, which depends on the offset), no longer
// matched it: ClaimExpired dropped its entry as stale and Recover never reconciled the payment.
func TestBinaryZoneOffsetWithSeconds(t *testing.T) {
	ctx := context.Background()
	for _, off := range []int{-9, -3630, -4*3600 - 56*60 - 2} { // the last: America/New_York LMT
		t.Run(strconv.Itoa(off), func(t *testing.T) {
			s := v3Open(t)
			at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).In(time.FixedZone("LMT", off))
			rec := &keystore.Record{Key: "k", State: keystore.StatePending, Request: keystore.Request{Method: "POST"},
				CreatedAt: at, UpdatedAt: at}
			if err := s.Create(ctx, rec); err != nil {
				t.Fatal(err)
			}
			got, err := s.Get(ctx, "", "k")
			if err != nil {
				t.Fatal(err)
			}
			if _, o := got.CreatedAt.Zone(); o != off || !got.CreatedAt.Equal(at) {
				t.Errorf("CreatedAt read back as %v (offset %d s), written as %v (offset %d s)", got.CreatedAt, o, at, off)
			}
			now := at.Add(time.Hour)
			claimed, err := s.ClaimExpired(ctx, keystore.Lease{Owner: "recover", Now: now, Until: now.Add(time.Minute)}, 10)
			if err != nil || len(claimed) != 1 {
				t.Errorf("ClaimExpired = %d records, %v; want the pending record", len(claimed), err)
			}
		})
	}
}

// A version 2 record whose time has a zone offset of -1 minute (RFC 3339 "-00:01", which JSON
// stored and reads back) is written again in binary. time.Time.MarshalBinary refused that
// offset (it means UTC in its format): the record read, but its final write failed with
// ErrInvalid, and a lease rewrite of it aborted the whole commit, so ClaimExpired claimed none
// of the pending records.
func TestV2RecordWithMinusOneMinuteOffsetRewritten(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keys.db")
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.FixedZone("", -60))
	odd := &keystore.Record{Key: "odd", State: keystore.StatePending, Request: keystore.Request{Method: "POST"}, CreatedAt: at, UpdatedAt: at}
	fine := &keystore.Record{Key: "fine", State: keystore.StatePending, Request: keystore.Request{Method: "POST"}, CreatedAt: at.UTC().Add(time.Second), UpdatedAt: at.UTC()}
	for _, r := range []*keystore.Record{odd.Clone(), fine} {
		r.CreatedAt, r.UpdatedAt = r.CreatedAt.UTC(), r.UpdatedAt.UTC() // what binary can write; replaced by v2 JSON below
		if err := s.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// Replace "odd" by the value version 2 wrote for it (same instant, so the index holds).
	if err := s.commit.do(ctx, func(tx *bbolt.Tx) error {
		k := scopedKey("", "odd")
		return tx.Bucket(bucketRecords).Put(k, legacyValue(t, &codec{}, k, odd))
	}); err != nil {
		t.Fatal(err)
	}
	s.summaries.drop(scopedKey("", "odd"))
	got, err := s.Get(ctx, "", "odd")
	if err != nil {
		t.Fatal(err)
	}
	if _, off := got.CreatedAt.Zone(); off != -60 || !got.CreatedAt.Equal(odd.CreatedAt) {
		t.Errorf("the v2 record's CreatedAt reads %v, want %v at offset -00:01", got.CreatedAt, odd.CreatedAt)
	}
	now := at.Add(time.Hour)
	claimed, err := s.ClaimExpired(ctx, keystore.Lease{Owner: "recover", Now: now, Until: now.Add(time.Minute)}, 10)
	if err != nil || len(claimed) != 2 {
		t.Errorf("ClaimExpired = %d records, %v; want both pending records", len(claimed), err)
	}
	got, _ = s.Get(ctx, "", "odd")
	next := got.Clone()
	next.State, next.Response = keystore.StateSucceeded, &keystore.Response{StatusCode: 201}
	if err := s.Update(ctx, next); err != nil {
		t.Errorf("final Update of the v2 record = %v", err)
	}
	_ = s.Close()
}

// Quarantine takes the settled record's method, URL and fingerprint from the damaged value
// (parseDamaged). From JSON those were always valid UTF-8 (encoding/json replaces invalid
// bytes); from the binary encoding invalid bytes are replaced the same way, so Quarantine
// never writes a record that Create and Update would refuse (checkUTF8).
func TestQuarantineReplacesInvalidUTF8FromBinaryDamage(t *testing.T) {
	ctx := context.Background()
	s := v3Open(t)
	rec := &keystore.Record{Scope: "t", Key: "k", Intent: "order-1", Fingerprint: "f", State: keystore.StatePending,
		Request: keystore.Request{Method: "POST", URL: "/v1/payments"}}
	if err := s.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	k := scopedKey("t", "k")
	if err := s.commit.do(ctx, func(tx *bbolt.Tx) error {
		v := bytes.Clone(tx.Bucket(bucketRecords).Get(k))
		i := bytes.Index(v, []byte("/v1/payments"))
		v[i] |= 0x80 // one damaged bit: '/' becomes 0xaf
		return tx.Bucket(bucketRecords).Put(k, v)
	}); err != nil {
		t.Fatal(err)
	}
	s.summaries.drop(k)
	got, err := s.Quarantine(ctx, "t", "k", Verdict{Executed: true, Note: "ops: ticket 1"})
	if err != nil {
		t.Fatal(err)
	}
	if !utf8.ValidString(got.Request.URL) || !utf8.ValidString(got.Request.Method) || !utf8.ValidString(got.Fingerprint) {
		t.Fatalf("Quarantine wrote a record with invalid UTF-8: URL %q", got.Request.URL)
	}
}
