package keystore

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
)

// KeyRing seals the request and response bodies a store persists with AES-GCM
// (crypto/cipher, NIST SP 800-38D): each sealed body carries the id of the key that sealed it,
// so that a ring holding the old keys beside a new current one reads every record while new
// writes use the current key (rotation without rewriting the file). A record written again
// (every update) is sealed with the current key. Metadata stays readable: scope, key, intent,
// state, URL, headers, times. The bbolt store takes one in Options.KeyRing.
//
// A KeyRing is immutable and safe for concurrent use.
type KeyRing struct {
	current string
	aeads   map[string]cipher.AEAD
}

// Errors of a KeyRing, usable with errors.Is. Reading a sealed record fails with one of them
// rather than return a record without its bodies: the caller stops (the client sends nothing).
var (
	// ErrKeyUnknown: the record was sealed with a key id that the ring does not hold (or the
	// store has no ring). The message names the id.
	ErrKeyUnknown = errors.New("keystore: body sealed with a key the key ring does not hold")
	// ErrKeyWrong: the ring holds a key under the record's key id, but it does not open the
	// body: another key was given under that id (or the sealed bytes were changed).
	ErrKeyWrong = errors.New("keystore: body does not open with the key ring's key of its id")
)

// maxKeyID is the longest key id, in bytes.
const maxKeyID = 64

// NewKeyRing returns a ring that seals with keys[current] and opens with any key in keys.
// Each key is 16, 24 or 32 bytes (AES-128, -192, -256); each id is 1 to 64 bytes of ASCII
// letters, digits, '.', '_' or '-'. Errors wrap ErrInvalid. keys is copied.
func NewKeyRing(current string, keys map[string][]byte) (*KeyRing, error) {
	if _, ok := keys[current]; !ok {
		return nil, fmt.Errorf("%w: key ring: current key id %q is not among the keys", ErrInvalid, current)
	}
	r := &KeyRing{current: current, aeads: make(map[string]cipher.AEAD, len(keys))}
	for id, k := range keys {
		if err := checkKeyID(id); err != nil {
			return nil, fmt.Errorf("%w: key ring: %w", ErrInvalid, err)
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, fmt.Errorf("%w: key ring: key %q: %w", ErrInvalid, id, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("%w: key ring: key %q: %w", ErrInvalid, id, err)
		}
		r.aeads[id] = aead
	}
	return r, nil
}

func checkKeyID(id string) error {
	if id == "" || len(id) > maxKeyID {
		return fmt.Errorf("key id %q: 1 to %d bytes", id, maxKeyID)
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("key id %q: only letters, digits, '.', '_' and '-'", id)
		}
	}
	return nil
}

// Current returns the id of the key that seals.
func (r *KeyRing) Current() string { return r.current }

// Check returns an error wrapping ErrInvalid for a ring that cannot seal: one not made by
// NewKeyRing (a zero KeyRing{}). A nil ring is valid: no sealing.
func (r *KeyRing) Check() error {
	if r == nil {
		return nil
	}
	if r.aeads[r.current] == nil {
		return fmt.Errorf("%w: key ring without its current key (make it with NewKeyRing)", ErrInvalid)
	}
	return nil
}

// sealedV1 is the first byte of a sealed body: version 1 of the layout
//
//	0x01, len(id) u8, id, nonce (12 bytes), AES-GCM ciphertext and tag (16 bytes)
const sealedV1 = 0x01

// Seal returns plain sealed with the current key, bound to ad (additional data that Open must
// be given again: the store passes the record's scope, key and which body it is, so that a
// sealed body moved to another record does not open). The nonce is random (crypto/rand): at
// most 2^32 bodies should be sealed under one key (SP 800-38D, 8.3), so rotate before that.
func (r *KeyRing) Seal(plain, ad []byte) ([]byte, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: sealing with a nil key ring", ErrInvalid)
	}
	if err := r.Check(); err != nil {
		return nil, err
	}
	aead := r.aeads[r.current]
	ns := aead.NonceSize()
	out := make([]byte, 0, 2+len(r.current)+ns+len(plain)+aead.Overhead())
	out = append(out, sealedV1, byte(len(r.current)))
	out = append(out, r.current...)
	nonce := out[len(out) : len(out)+ns]
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("keystore: sealing a body: %w", err)
	}
	out = out[:len(out)+ns]
	return aead.Seal(out, nonce, plain, ad), nil
}

// Open returns the body that Seal sealed with ad. It returns an error wrapping ErrKeyUnknown
// if the ring (possibly nil) lacks the body's key id, ErrKeyWrong if that key does not open
// it, and ErrInvalid if sealed is not a sealed body at all.
func (r *KeyRing) Open(sealed, ad []byte) ([]byte, error) {
	id, rest, err := splitSealed(sealed)
	if err != nil {
		return nil, err
	}
	var aead cipher.AEAD
	if r != nil {
		aead = r.aeads[id]
	}
	if aead == nil {
		return nil, fmt.Errorf("%w: key id %q", ErrKeyUnknown, id)
	}
	ns := aead.NonceSize()
	if len(rest) < ns+aead.Overhead() {
		return nil, fmt.Errorf("%w: sealed body of %d bytes is too short", ErrInvalid, len(sealed))
	}
	plain, err := aead.Open(nil, rest[:ns], rest[ns:], ad)
	if err != nil {
		return nil, fmt.Errorf("%w: key id %q: %w", ErrKeyWrong, id, err)
	}
	return plain, nil
}

// SealedKeyID returns the id of the key that sealed a body, for an operator's tool; an error
// wrapping ErrInvalid if sealed is not a sealed body.
func SealedKeyID(sealed []byte) (string, error) {
	id, _, err := splitSealed(sealed)
	return id, err
}

func splitSealed(b []byte) (id string, rest []byte, err error) {
	if len(b) < 2 || b[0] != sealedV1 || int(b[1]) > len(b)-2 || b[1] == 0 {
		return "", nil, fmt.Errorf("%w: not a sealed body", ErrInvalid)
	}
	n := int(b[1])
	return string(b[2 : 2+n]), b[2+n:], nil
}
