package idemserver

import (
	"crypto/sha256"
	"encoding/binary"
)

// Fingerprint returns the SHA-256 over method, operation, the body's kind (JSON or raw) and
// the canonical body, each length-prefixed so that no two different requests share an input.
// See CanonicalBody.
func Fingerprint(method, operation string, body []byte) []byte {
	return fingerprint(nil, method, operation, canonicalize(body))
}

// fingerprint appends to dst Fingerprint over a body already canonicalised.
func fingerprint(dst []byte, method, operation string, c canonical) []byte {
	h := sha256.New()
	var n [8]byte
	kind := []byte("raw")
	if c.isJSON {
		kind = []byte("json")
	}
	for _, part := range [][]byte{[]byte(method), []byte(operation), kind, c.out} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return h.Sum(dst)
}
