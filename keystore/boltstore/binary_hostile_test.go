package boltstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"

	"github.com/idemkit/idem/keystore"
)

// Hostile record values with a valid checksum: every one is refused with ErrCorrupt (or a key
// ring error for a sealed body), never a panic and never a record.
func TestBinaryHostileValuesRefused(t *testing.T) {
	k := scopedKey("s", "k")
	rec := &keystore.Record{Scope: "s", Key: "k", State: keystore.StatePending, Request: keystore.Request{Method: "POST", Body: []byte("b")}}
	good, err := appendBinary(nil, rec)
	if err != nil {
		t.Fatal(err)
	}
	// prefix: version, str "s", str "k" (scope and key as stored)
	prefix := []byte{binaryVersion, 1, 's', 1, 'k'}
	huge := binary.AppendUvarint(nil, 1<<63)
	over := bytes.Repeat([]byte{0xff}, 11) // a uvarint longer than 64 bits
	cases := map[string][]byte{
		"empty":                 {},
		"flags only":            {flagBinary},
		"unknown flag":          append([]byte{0x04}, good...),
		"version 0":             append([]byte{flagBinary, 0}, good[1:]...),
		"version 2":             append([]byte{flagBinary, 2}, good[1:]...),
		"version 255":           append([]byte{flagBinary, 255}, good[1:]...),
		"trailing byte":         append(append([]byte{flagBinary}, good...), 0),
		"JSON claiming binary":  append([]byte{flagBinary}, `{"scope":"s","key":"k","state":"pending","request":{"method":"POST"}}`...),
		"binary claiming JSON":  append([]byte{0}, good...),
		"huge string length":    append(append([]byte{flagBinary}, binaryVersion), huge...),
		"overlong uvarint":      append(append([]byte{flagBinary}, binaryVersion), over...),
		"huge header count":     append(append(append([]byte{flagBinary}, prefix...), 0, 0, 1, 'P', 0), huge...),
		"header count = rest":   append(append([]byte{flagBinary}, prefix...), 0, 0, 1, 'P', 0, 20, 1, 'a'),
		"huge value count":      append(append(append([]byte{flagBinary}, prefix...), 0, 0, 1, 'P', 0, 1, 1, 'a'), huge...),
		"duplicate header":      append(append([]byte{flagBinary}, prefix...), 0, 0, 1, 'P', 0, 2, 1, 'a', 0, 1, 'a', 0),
		"sealed, not a box":     append([]byte{flagBinary | flagSealed}, good...),
		"sealed, without flags": append([]byte{flagSealed}, good...),
	}
	ring := v3Ring(t)
	for name, rest := range cases {
		for _, c := range []*codec{{}, {ring: ring}} {
			v := seal(k, rest)
			got, err := c.decode(k, v)
			if err == nil {
				t.Errorf("%s: decoded to %+v", name, got)
				continue
			}
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, keystore.ErrKeyUnknown) && !errors.Is(err, keystore.ErrKeyWrong) {
				t.Errorf("%s: %v, want ErrCorrupt", name, err)
			}
			if _, err := decodeSummary(k, v); err == nil && name != "sealed, not a box" && name != "duplicate header" {
				t.Errorf("%s: summary decodes", name)
			}
			_ = parseDamaged(v)
		}
	}
	// A changed byte anywhere in a sound value fails its checksum.
	v, err := (&codec{}).value(k, rec)
	if err != nil {
		t.Fatal(err)
	}
	for i := range v {
		bad := bytes.Clone(v)
		bad[i] ^= 0x10
		if _, err := (&codec{}).decode(k, bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d changed: %v", i, err)
		}
	}
}

// A declared header count is bounded only by the bytes left (binReader.header), so it is a
// size hint the decoder caps: allocated as declared, a crafted value of 1 MiB (its checksum
// is not secret) made one decode allocate about 96 MiB, every time the record was read (Get,
// List, Recover at start-up). The allocation stays within a small multiple of the value.
func TestBinaryDeclaredHeaderCountAllocation(t *testing.T) {
	k := scopedKey("s", "k")
	n := 1 << 18
	rest := []byte{flagBinary, binaryVersion, 1, 's', 1, 'k', 0, 0, 1, 'P', 0}
	rest = binary.AppendUvarint(rest, uint64(n))
	rest = append(rest, make([]byte, n)...)
	v := seal(k, rest)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	_, err := (&codec{}).decode(k, v)
	runtime.ReadMemStats(&m1)
	allocated := int64(m1.TotalAlloc - m0.TotalAlloc)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("decode = %v, want ErrCorrupt", err)
	}
	if allocated > int64(8*len(v)) {
		t.Fatalf("decoding a %d-byte value allocated %d bytes (%dx)", len(v), allocated, allocated/int64(len(v)))
	}
}
