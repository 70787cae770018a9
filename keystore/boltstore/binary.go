package boltstore

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/http"
	"slices"
	"time"

	"github.com/idemkit/idem/keystore"
)

// A record written by this code (schema version 3) is stored in a binary encoding rather
// than JSON: encoding/json took about 12% of the process's CPU at 64 durable callers, and the
// JSON of a record is about twice the size of its binary form, so fewer pages are written per
// commit. The flags byte tells the two apart (flagBinary); records written as JSON by earlier
// versions are read as before and rewritten in binary at their next write.
//
// After the flags byte, a binary record is:
//
//	version byte (binaryVersion)
//	str scope, str key, str intent, str fingerprint
//	str method, str url, header, bytes body                       (the request)
//	byte state (1 pending, 2 succeeded, 3 failed, 4 manual)
//	varint attempts, varint last status, str reason, byte not-executed (0 or 1), str error
//	byte 0 (no response) | byte 1, varint status, header, bytes body
//	time created, time updated, str owner, time lease until, varint fence, str note
//
// where str and bytes are uvarint(len) || bytes, header is uvarint(number of names), then per
// name in sorted order str name, uvarint(number of values + 1, 0 for a nil list) and each value
// as str, and time is a byte n || the n bytes of varint(Unix seconds), uvarint(nanoseconds)
// and varint(zone offset in seconds). An empty body, an empty header and a zero-length list decode as
// encoding/json decodes them from the JSON this package wrote (nil, nil, and an empty list),
// so a record reads back the same whichever encoding holds it. The decoder refuses anything
// it does not consume exactly.
const (
	// flagBinary: the record after the flags byte is in the binary encoding above, not JSON.
	flagBinary = 0x02

	binaryVersion = 1
)

// stateCodes are the state bytes of the binary encoding, index = code.
var stateCodes = [...]keystore.State{1: keystore.StatePending, 2: keystore.StateSucceeded, 3: keystore.StateFailed, 4: keystore.StateManual}

func stateCode(s keystore.State) byte {
	for i, v := range stateCodes {
		if i > 0 && v == s {
			return byte(i)
		}
	}
	return 0
}

// binarySize is an upper bound of the encoded size of rec, to allocate the value once. It
// counts each length prefix at its own size rather than at binary.MaxVarintLen64: the value
// is kept until its commit (and by the summary cache), and the looser bound allocated about
// twice its size.
func binarySize(rec *keystore.Record) int {
	const (
		varint = binary.MaxVarintLen64 // attempts, status codes, fence
		timeN  = 1 + 16                // length byte, Unix seconds, nanoseconds, zone offset
	)
	n := 1 + strSize(rec.Scope) + strSize(rec.Key) + strSize(rec.Intent) + strSize(rec.Fingerprint) +
		strSize(rec.Request.Method) + strSize(rec.Request.URL) + headerSize(rec.Request.Header) +
		uvarintSize(len(rec.Request.Body)) + len(rec.Request.Body) +
		1 + 2*varint + strSize(rec.Reason) + 1 + strSize(rec.Error) + 1 +
		3*timeN + strSize(rec.Owner) + varint + strSize(rec.Note)
	if r := rec.Response; r != nil {
		n += varint + headerSize(r.Header) + uvarintSize(len(r.Body)) + len(r.Body)
	}
	return n
}

// uvarintSize is the length of binary.AppendUvarint(nil, uint64(n)), n >= 0.
func uvarintSize(n int) int {
	return (bits.Len64(uint64(n)|1) + 6) / 7
}

func strSize(s string) int { return uvarintSize(len(s)) + len(s) }

func headerSize(h http.Header) int {
	n := uvarintSize(len(h))
	for k, vs := range h {
		n += strSize(k) + uvarintSize(len(vs)+1)
		for _, v := range vs {
			n += strSize(v)
		}
	}
	return n
}

// appendBinary appends the binary encoding of rec (valid, its state known) to b. Errors (a
// time outside the years 0 to 9999) wrap keystore.ErrInvalid.
func appendBinary(b []byte, rec *keystore.Record) ([]byte, error) {
	b = append(b, binaryVersion)
	b = appendStr(b, rec.Scope)
	b = appendStr(b, rec.Key)
	b = appendStr(b, rec.Intent)
	b = appendStr(b, rec.Fingerprint)
	b = appendStr(b, rec.Request.Method)
	b = appendStr(b, rec.Request.URL)
	b = appendHeader(b, rec.Request.Header)
	b = appendBytes(b, rec.Request.Body)
	b = append(b, stateCode(rec.State))
	b = binary.AppendVarint(b, int64(rec.Attempts))
	b = binary.AppendVarint(b, int64(rec.LastStatusCode))
	b = appendStr(b, rec.Reason)
	b = append(b, boolByte(rec.NotExecuted))
	b = appendStr(b, rec.Error)
	if r := rec.Response; r == nil {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = binary.AppendVarint(b, int64(r.StatusCode))
		b = appendHeader(b, r.Header)
		b = appendBytes(b, r.Body)
	}
	var err error
	if b, err = appendTime(b, rec.CreatedAt); err != nil {
		return nil, err
	}
	if b, err = appendTime(b, rec.UpdatedAt); err != nil {
		return nil, err
	}
	b = appendStr(b, rec.Owner)
	if b, err = appendTime(b, rec.LeaseUntil); err != nil {
		return nil, err
	}
	b = binary.AppendVarint(b, rec.Fence)
	return appendStr(b, rec.Note), nil
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendHeader(b []byte, h http.Header) []byte {
	b = binary.AppendUvarint(b, uint64(len(h)))
	if len(h) == 0 {
		return b
	}
	var arr [16]string
	names := arr[:0]
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		b = appendStr(b, k)
		vs := h[k]
		if vs == nil {
			b = append(b, 0)
			continue
		}
		b = binary.AppendUvarint(b, uint64(len(vs))+1)
		for _, v := range vs {
			b = appendStr(b, v)
		}
	}
	return b
}

func appendTime(b []byte, t time.Time) ([]byte, error) {
	// Years JSON cannot carry are refused, as the JSON encoding of schema version 2 refused
	// them: tools that print records as JSON (idemctl -json) must be able to.
	if y := t.Year(); y < 0 || y > 9999 {
		return nil, fmt.Errorf("%w: time %v: year outside of range [0,9999]", keystore.ErrInvalid, t)
	}
	_, off := t.Zone()
	if off <= -24*3600 || off >= 24*3600 {
		// RFC 3339 (and so the JSON of version 2) cannot write it, and the reader refuses it:
		// stored, the record would read back as ErrCorrupt.
		return nil, fmt.Errorf("%w: time %v: zone offset %ds outside of (-24h, 24h)", keystore.ErrInvalid, t, off)
	}
	at := len(b)
	b = append(b, 0)
	b = binary.AppendVarint(b, t.Unix())
	b = binary.AppendUvarint(b, uint64(t.Nanosecond()))
	b = binary.AppendVarint(b, int64(off))
	b[at] = byte(len(b) - at - 1)
	return b, nil
}
