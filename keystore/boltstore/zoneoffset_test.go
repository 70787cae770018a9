package boltstore

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
)

// binarySize counts a time as 17 bytes (timeN), but appendTime writes a length byte, Unix
// seconds (zigzag varint: 6 bytes from about 545 years away from 1970), nanoseconds (5 bytes
// from 2^28) and the zone offset (zigzag varint: 6 bytes for an offset of 2^34 s or more, which
// time.FixedZone accepts and the year check lets through): 18 bytes. With every varint at its
// widest (attempts, status codes, fence), nothing else in the bound has slack, so the bound
// falls 3 bytes short: the value's buffer, sized once from binarySize in codec.value, is grown
// (copied) in the middle of the encoding, against binarySize's doc ("an upper bound"). A valid
// record (Validate passes, years within 0 to 9999) must never outgrow its bound. (Such an
// offset is also one the decoder refuses, see TestUnreadableZoneOffsetIsRefused: a fix
// that refuses it on encode passes this test too.)
func TestBinarySizeBoundsExtremeTimes(t *testing.T) {
	zone := time.FixedZone("far", -(1<<34 + 1))
	at := time.Date(9000, 12, 31, 23, 59, 59, 999_999_999, time.UTC).In(zone) // local year 8455
	if y := at.Year(); y < 0 || y > 9999 {
		t.Fatalf("local year %d outside the encodable range", y)
	}
	rec := &keystore.Record{Scope: "s", Key: "k", Owner: "o", Fence: math.MaxInt64,
		Request: keystore.Request{Method: "POST"}, State: keystore.StateSucceeded,
		Attempts: math.MinInt64, LastStatusCode: math.MinInt64,
		Response:  &keystore.Response{StatusCode: math.MinInt64},
		CreatedAt: at, UpdatedAt: at, LeaseUntil: at}
	if err := rec.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := appendBinary(nil, rec)
	if errors.Is(err, keystore.ErrInvalid) {
		return // refused: nothing to bound
	}
	if err != nil {
		t.Fatal(err)
	}
	if size := binarySize(rec); len(b) > size {
		t.Errorf("encoding of %d bytes, binarySize %d: the bound is short by %d", len(b), size, len(b)-size)
	}
	k := scopedKey(rec.Scope, rec.Key)
	v, err := (&codec{}).value(k, rec)
	if err != nil {
		t.Fatal(err)
	}
	if want := crcSize + 1 + binarySize(rec); cap(v) > want {
		t.Errorf("codec.value grew its buffer mid-encode: cap %d, sized %d", cap(v), want)
	}
}

// The decoder refuses a zone offset of 24 hours or more (binReader.time), so appendTime must
// too: time.FixedZone makes one, Validate and checkUTF8 pass it, and once committed every
// later read of the record failed with ErrCorrupt, a record persisted as valid lost to Get,
// List and Recover (and, since the overlay decodes the deferred value, Get failed right after
// UpdateDeferred returned nil). The store refuses it with ErrInvalid.
func TestUnreadableZoneOffsetIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	s, err := Open(path, &Options{FlushDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	at := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	rec := &keystore.Record{Key: "k", State: keystore.StatePending,
		Request: keystore.Request{Method: "POST"}, CreatedAt: at, UpdatedAt: at}
	if err := s.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	next := rec.Clone()
	next.UpdatedAt = at.In(time.FixedZone("", 25*3600))
	if err := s.UpdateDeferred(ctx, next); errors.Is(err, keystore.ErrInvalid) {
		return // refused
	} else if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "", "k"); err != nil || !got.UpdatedAt.Equal(at) {
		t.Errorf("before the commit: Get = %v, %v; want the accepted record", got, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "", "k"); err != nil || !got.UpdatedAt.Equal(at) {
		t.Errorf("committed: Get = %v, %v; want the accepted record", got, err)
	}
}
