package boltstore

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"go.etcd.io/bbolt"
)

// bbolt checksums its meta pages only: a changed byte in a record, or in an index key, would
// read as another value or as a miss (an intent paid twice). Every value this package writes
// in the records and intent buckets (schema version 2 and later) starts with a CRC-32C (Castagnoli) of
// the entry's bucket key and the rest of the value, checked on every read:
//
//	value = crc32c(uvarint(len(k)) || k || rest), 4 bytes big-endian || rest
//
// CRC-32C detects every change of up to 32 consecutive bits, so any one-byte change of a key
// or a value is damage. A changed key is also caught on a point lookup, which never reads the
// damaged key itself: every intent is indexed twice, in "intents" under its scoped name and in
// "intenthash" under a SHA-256 of that name; one byte can damage only one of the two, and a
// lookup that finds one entry without the other reports damage, never a miss.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crcSize is the length of the checksum that starts every value.
const crcSize = 4

// entrySum is the checksum of the entry (k, rest).
func entrySum(k []byte, rest ...[]byte) uint32 {
	// The length's uvarint bytes go through the table one by one: a buffer handed to
	// crc32.Update escapes, which cost every checksum an allocation.
	c := uint32(0)
	x := uint64(len(k))
	for ; x >= 0x80; x >>= 7 {
		c = crcByte(c, byte(x)|0x80)
	}
	c = crcByte(c, byte(x))
	c = crc32.Update(c, castagnoli, k)
	for _, r := range rest {
		c = crc32.Update(c, castagnoli, r)
	}
	return c
}

// crcByte is crc32.Update(c, castagnoli, []byte{b}).
func crcByte(c uint32, b byte) uint32 {
	c = ^c
	c = castagnoli[byte(c)^b] ^ (c >> 8)
	return ^c
}

// seal returns the value of entry k: its checksum, then the parts of rest.
func seal(k []byte, rest ...[]byte) []byte {
	n := crcSize
	for _, r := range rest {
		n += len(r)
	}
	v := make([]byte, crcSize, n)
	binary.BigEndian.PutUint32(v, entrySum(k, rest...))
	for _, r := range rest {
		v = append(v, r...)
	}
	return v
}

// errChecksum is wrapped in the ErrCorrupt error of an entry whose checksum does not match.
var errChecksum = errors.New("checksum mismatch")

// unseal checks the checksum of v, the value stored under k, and returns the rest (sharing
// v's memory). The error wraps ErrCorrupt; what names the entry for the message.
func unseal(k, v []byte, what string) ([]byte, error) {
	if len(v) < crcSize {
		return nil, fmt.Errorf("%w: %s: value of %d bytes, shorter than its checksum", ErrCorrupt, what, len(v))
	}
	if binary.BigEndian.Uint32(v) != entrySum(k, v[crcSize:]) {
		return nil, fmt.Errorf("%w: %s: %w (a changed byte in its key or value)", ErrCorrupt, what, errChecksum)
	}
	return v[crcSize:], nil
}

// bucketIntentHash holds the second copy of the intent index: intentHash(scopedKey(scope,
// intent)) -> checksum || uvarint(len(name)) || name || key, where name is that scoped intent.
var bucketIntentHash = []byte("intenthash")

// intentHash is the key of the scoped intent ik in bucketIntentHash: the first 16 bytes of
// its SHA-256.
func intentHash(ik []byte) []byte {
	h := sha256.Sum256(ik)
	return h[:16]
}

// putIntent indexes the scoped intent ik as naming the record key key, in both indexes.
func putIntent(tx *bbolt.Tx, ik []byte, key string) error {
	if err := tx.Bucket(bucketIntents).Put(ik, seal(ik, []byte(key))); err != nil {
		return err
	}
	hk := intentHash(ik)
	var n [binary.MaxVarintLen64]byte
	return tx.Bucket(bucketIntentHash).Put(hk, seal(hk, n[:binary.PutUvarint(n[:], uint64(len(ik)))], ik, []byte(key)))
}

// deleteIntent removes the scoped intent ik from both indexes.
func deleteIntent(tx *bbolt.Tx, ik []byte) error {
	if err := tx.Bucket(bucketIntents).Delete(ik); err != nil {
		return err
	}
	return tx.Bucket(bucketIntentHash).Delete(intentHash(ik))
}

// lookupIntent returns the record key that the scoped intent ik names, found false if neither
// index holds it. An entry in one index without the other, a checksum mismatch, or two
// entries that disagree is ErrCorrupt (content damage: the store goes on for other intents).
func lookupIntent(tx *bbolt.Tx, ik []byte) (key string, found bool, err error) {
	a := tx.Bucket(bucketIntents).Get(ik)
	hk := intentHash(ik)
	h := tx.Bucket(bucketIntentHash).Get(hk)
	if a == nil && h == nil { // a free intent: every Create with an intent looks it up
		return "", false, nil
	}
	what := fmt.Sprintf("intent index entry %q", clip(ik))
	switch {
	case a == nil:
		return "", false, fmt.Errorf("%w: %s: missing from \"intents\" but in \"intenthash\" (a damaged index key; run idemctl verify)", ErrCorrupt, what)
	case h == nil:
		return "", false, fmt.Errorf("%w: %s: missing from \"intenthash\" but in \"intents\" (a damaged index key; run idemctl verify)", ErrCorrupt, what)
	}
	if len(a) > bbolt.MaxKeySize+crcSize || len(h) > 2*bbolt.MaxKeySize+16 {
		return "", false, structural(fmt.Errorf("%w: %s: value of %d bytes", ErrCorrupt, what, max(len(a), len(h))))
	}
	name, err := unseal(ik, a, what)
	if err != nil {
		return "", false, err
	}
	hname, hkey, err := openIntentHash(hk, h)
	if err != nil {
		return "", false, err
	}
	if string(hname) != string(ik) || string(hkey) != string(name) {
		return "", false, fmt.Errorf("%w: %s: the two intent indexes disagree (%q, %q)", ErrCorrupt, what, clip(name), clip(hkey))
	}
	return string(name), true, nil
}

// openIntentHash checks and splits an entry of bucketIntentHash.
func openIntentHash(hk, v []byte) (ik, key []byte, err error) {
	rest, err := unseal(hk, v, fmt.Sprintf("intenthash entry %x", hk))
	if err != nil {
		return nil, nil, err
	}
	n, w := binary.Uvarint(rest)
	if w <= 0 || n > uint64(len(rest)-w) {
		return nil, nil, fmt.Errorf("%w: intenthash entry %x: malformed", ErrCorrupt, hk)
	}
	return rest[w : w+int(n)], rest[w+int(n):], nil
}
