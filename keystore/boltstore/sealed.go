package boltstore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/idemkit/idem/keystore"
)

// A record's value is checksum || flags || record (see checksum.go): the record in the
// binary encoding (binary.go) if the flags say so, else JSON (schema version 2). The flags
// byte says how the record is to be read:
const (
	// flagSealed: the request and response bodies in the JSON are not the bodies but
	// keystore.KeyRing sealed boxes of them (AES-GCM, the key id inside each box), bound to
	// the record's scope and key and to which body it is. Empty bodies are not sealed.
	flagSealed = 0x01

	flagsKnown = flagSealed | flagBinary
)

// codec turns records into values and back: the checksum always, the sealing of bodies when
// the store has a key ring.
type codec struct {
	ring *keystore.KeyRing // nil: bodies are written in plaintext
}

// bodyAD is the additional data that binds a sealed body to its record and to its place in
// it: a box moved to another record, or from the request to the response, does not open.
func bodyAD(k []byte, which string) []byte {
	ad := make([]byte, 0, len("idem-boltstore-body/")+len(which)+1+len(k))
	ad = append(ad, "idem-boltstore-body/"...)
	ad = append(ad, which...)
	ad = append(ad, '/')
	return append(ad, k...)
}

// value returns the value to store under k for rec (the stored copy: valid, secrets
// stripped): checksum, flags, and the binary encoding of rec with its bodies sealed if the
// codec has a ring. rec is not modified. Errors wrap keystore.ErrInvalid.
func (c *codec) value(k []byte, rec *keystore.Record) ([]byte, error) {
	flags := byte(flagBinary)
	if c != nil && c.ring != nil {
		flags |= flagSealed
		sealed := *rec
		var err error
		if sealed.Request.Body, err = c.sealBody(k, "request", rec.Request.Body); err != nil {
			return nil, err
		}
		if rec.Response != nil {
			resp := *rec.Response
			if resp.Body, err = c.sealBody(k, "response", resp.Body); err != nil {
				return nil, err
			}
			sealed.Response = &resp
		}
		rec = &sealed
	}
	v := make([]byte, crcSize, crcSize+1+binarySize(rec))
	v = append(v, flags)
	v, err := appendBinary(v, rec)
	if err != nil {
		return nil, err
	}
	binary.BigEndian.PutUint32(v, entrySum(k, v[crcSize:]))
	return v, nil
}

func (c *codec) sealBody(k []byte, which string, body []byte) ([]byte, error) {
	if len(body) == 0 {
		return body, nil
	}
	b, err := c.ring.Seal(body, bodyAD(k, which))
	if err != nil {
		return nil, errors.Join(keystore.ErrInvalid, err)
	}
	return b, nil
}

// openBodies replaces rec's sealed bodies by the bodies. Errors wrap keystore.ErrKeyUnknown
// (no ring, or not the body's key id), keystore.ErrKeyWrong, or ErrCorrupt for a box that is
// not one.
func (c *codec) openBodies(k []byte, rec *keystore.Record) error {
	var ring *keystore.KeyRing
	if c != nil {
		ring = c.ring
	}
	open := func(which string, b []byte) ([]byte, error) {
		if len(b) == 0 {
			return b, nil
		}
		out, err := ring.Open(b, bodyAD(k, which))
		if errors.Is(err, keystore.ErrInvalid) {
			return nil, fmt.Errorf("%w: %s body: %w", ErrCorrupt, which, err)
		}
		if err != nil {
			return nil, fmt.Errorf("%s body: %w", which, err)
		}
		return out, nil
	}
	var err error
	if rec.Request.Body, err = open("request", rec.Request.Body); err != nil {
		return err
	}
	if rec.Response != nil {
		if rec.Response.Body, err = open("response", rec.Response.Body); err != nil {
			return err
		}
	}
	return nil
}

// recordBytes checks the checksum of v, the value of record (scope, key) under k, and returns
// its flags and the record after them (JSON or binary, as the flags say). Errors wrap
// ErrCorrupt.
func recordBytes(scope, key string, k, v []byte) (byte, []byte, error) {
	rest, err := unseal(k, v, fmt.Sprintf("record (%q, %q)", scope, key))
	if err != nil {
		return 0, nil, err
	}
	if len(rest) == 0 || rest[0]&^flagsKnown != 0 {
		return 0, nil, fmt.Errorf("%w: record (%q, %q): unknown flags", ErrCorrupt, scope, key)
	}
	return rest[0], rest[1:], nil
}
