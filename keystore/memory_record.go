package keystore

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"net/http"
)

// How Memory holds a record. Every record it keeps stays in the heap until retention drops
// it, and the garbage collector walks all of them on every cycle: kept as http.Header maps
// and separate slices, the retained records made GC the largest cost of a Memory call (the
// loopback happy path took 1.40x retryablehttp's time; 1.22x with records dropped at once,
// an experiment). So the headers and bodies
// are packed into one pointer-free byte slice per request and per response, which the
// collector never scans, and a map is rebuilt only for a caller that reads the record back
// (Get, List, claims): rare next to Create and the final write.

// memRecord is a stored record. The embedded Record holds every field but the packed ones:
// its Request.Header, Request.Body and Response are always nil. Its lease fields are changed
// in place by Claim, Renew and Release; nothing else is ever modified once stored, so an
// Update that keeps the request shares req with the previous version.
type memRecord struct {
	Record
	req  []byte // packed Request.Header (without CredentialHeaders) and Request.Body
	resp []byte // packed Response (its header without secrets), nil if none
}

// newMemRecord is the stored form of rec, by StoredCopy's rules: no credentials, no
// Set-Cookie in a response.
func newMemRecord(rec *Record) *memRecord {
	mr := &memRecord{Record: *rec, req: packRequest(&rec.Request)}
	mr.Request.Header, mr.Request.Body = nil, nil
	mr.setResponse(rec.Response)
	return mr
}

// updated is the stored form of rec, an Update of mr: like newMemRecord, except that the
// packed request, which a client never changes after Create, is shared when it is the same.
func (mr *memRecord) updated(rec *Record) *memRecord {
	if rec.Request.Method != mr.Request.Method || rec.Request.URL != mr.Request.URL ||
		!sameRequest(mr.req, &rec.Request) {
		return newMemRecord(rec)
	}
	next := &memRecord{Record: *rec, req: mr.req}
	next.Request.Header, next.Request.Body = nil, nil
	next.setResponse(rec.Response)
	return next
}

func (mr *memRecord) setResponse(resp *Response) {
	mr.Response, mr.resp = nil, nil
	if resp != nil {
		mr.resp = packResponse(resp)
	}
}

// export returns a deep copy of the record for a caller.
func (mr *memRecord) export() *Record {
	if mr == nil {
		return nil
	}
	c := mr.Record
	u := unpacker{b: mr.req}
	c.Request.Header = u.header()
	c.Request.Body = u.body()
	if mr.resp != nil {
		u = unpacker{b: mr.resp}
		c.Response = &Response{StatusCode: int(u.varint())}
		c.Response.Header = u.header()
		c.Response.Body = u.body()
	}
	return &c
}

// The packed form: a header is uvarint(number of names), then per name the name and
// uvarint(values+1) (0 for a nil slice, which net/http's Header.Clone keeps apart from an
// empty one) and the values; a string or body is uvarint(length) and its bytes (an empty
// body reads back as nil, as cloneBytes makes it). A response starts with varint(status).

func packRequest(r *Request) []byte {
	b := make([]byte, 0, packedSize(r.Header, r.Body, CredentialHeaders))
	b = appendHeader(b, r.Header, CredentialHeaders)
	return appendBytes(b, r.Body)
}

func packResponse(r *Response) []byte {
	b := make([]byte, 0, binary.MaxVarintLen64+packedSize(r.Header, r.Body, CredentialHeaders, ResponseSecretHeaders))
	b = binary.AppendVarint(b, int64(r.StatusCode))
	b = appendHeader(b, r.Header, CredentialHeaders, ResponseSecretHeaders)
	return appendBytes(b, r.Body)
}

// packedSize is the exact size of the packed header (without the names in drop) and body, so
// that packing allocates once and the retained slice wastes nothing.
func packedSize(h http.Header, body []byte, drop ...[]string) int {
	n, names := uvarintLen(uint64(len(body)))+len(body), 0
	for k, vs := range h {
		if dropped(k, drop) {
			continue
		}
		names++
		n += uvarintLen(uint64(len(k))) + len(k) + uvarintLen(uint64(len(vs))+1)
		for _, v := range vs {
			n += uvarintLen(uint64(len(v))) + len(v)
		}
	}
	return n + uvarintLen(uint64(names))
}

// uvarintLen is the length of binary.AppendUvarint's encoding of v.
func uvarintLen(v uint64) int { return max(1, (bits.Len64(v)+6)/7) }

func appendHeader(b []byte, h http.Header, drop ...[]string) []byte {
	n := 0
	for k := range h {
		if !dropped(k, drop) {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for k, vs := range h {
		if dropped(k, drop) {
			continue
		}
		b = appendString(b, k)
		if vs == nil {
			b = binary.AppendUvarint(b, 0)
			continue
		}
		b = binary.AppendUvarint(b, uint64(len(vs))+1)
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

func dropped(name string, drop [][]string) bool {
	for _, d := range drop {
		if isSecret(name, d) {
			return true
		}
	}
	return false
}

// unpacker reads what the pack functions wrote. Memory reads only bytes it packed itself,
// but a short or inconsistent slice still yields zero values rather than a panic.
type unpacker struct{ b []byte }

func (u *unpacker) uvarint() uint64 { return next(u, binary.Uvarint) }
func (u *unpacker) varint() int64   { return next(u, binary.Varint) }

// next reads one number with decode (binary.Uvarint or Varint); past the end, zero.
func next[T uint64 | int64](u *unpacker, decode func([]byte) (T, int)) T {
	v, n := decode(u.b)
	if n <= 0 {
		u.b = nil
		return 0
	}
	u.b = u.b[n:]
	return v
}

// view returns the next length-prefixed bytes, shared with the packed slice.
func (u *unpacker) view() []byte {
	n := u.uvarint()
	if n > uint64(len(u.b)) {
		u.b = nil
		return nil
	}
	v := u.b[:n:n]
	u.b = u.b[n:]
	return v
}

func (u *unpacker) body() []byte { return cloneBytes(u.view()) }

// header rebuilds a fresh http.Header (nil if it had no names).
func (u *unpacker) header() http.Header {
	n := u.uvarint()
	if n == 0 || n > uint64(len(u.b)) { // every name takes at least one byte
		return nil
	}
	h := make(http.Header, n)
	for range n {
		name := string(u.view())
		m := u.uvarint()
		if m == 0 {
			h[name] = nil
			continue
		}
		if m-1 > uint64(len(u.b)) {
			return h
		}
		vs := make([]string, m-1)
		for i := range vs {
			vs[i] = string(u.view())
		}
		h[name] = vs
	}
	return h
}

// sameRequest reports whether the packed request equals next's header and body, without
// unpacking it: next must hold the same names (none of them credentials, which packing
// drops) with the same values.
func sameRequest(packed []byte, next *Request) bool {
	u := unpacker{b: packed}
	n := u.uvarint()
	if n != uint64(len(next.Header)) {
		return false
	}
	for range n {
		vs, ok := next.Header[string(u.view())] // no allocation: the compiler looks up in place
		m := u.uvarint()
		if !ok || (m == 0) != (vs == nil) || (m > 0 && m-1 != uint64(len(vs))) {
			return false
		}
		for i := uint64(1); i < m; i++ {
			if string(u.view()) != vs[i-1] {
				return false
			}
		}
	}
	return bytes.Equal(u.view(), next.Body) && len(u.b) == 0
}
