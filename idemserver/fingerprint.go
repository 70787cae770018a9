package idemserver

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
)

// Fingerprint returns the SHA-256 over method, operation and the canonical body, each
// length-prefixed so that no two different requests share an input. See CanonicalBody.
func Fingerprint(method, operation string, body []byte) []byte {
	h := sha256.New()
	var n [8]byte
	for _, part := range [][]byte{[]byte(method), []byte(operation), CanonicalBody(body)} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return h.Sum(nil)
}

// CanonicalBody returns body in the form the fingerprint hashes: a body that is valid JSON is
// re-encoded with object keys sorted and no insignificant whitespace (numbers keep their
// text, so 1 and 1.0 differ); any other body is returned unchanged, byte for byte.
func CanonicalBody(body []byte) []byte {
	if len(bytes.TrimSpace(body)) == 0 || !json.Valid(body) {
		return body
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return body
	}
	out, err := json.Marshal(v) // maps are encoded with sorted keys
	if err != nil {
		return body
	}
	return append([]byte{'j'}, out...) // never equal to a raw body with the same text
}
