package keystore

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"net/http"
	"time"
)

// How Memory holds a record. Every record it keeps stays in the heap until retention drops
// it: while the store fills, each record is fresh memory that the process must fault in and
// zero (on the 2-vCPU VM of docs/PERFORMANCE.md, about 10 µs a 4 KiB page, twice over with
// the collector's headroom), and the collector marks it on every cycle. Kept as a Record (a
// dozen strings, two http.Header maps, separate slices: five objects and about 880 bytes a
// record with its indexes), the retained records were the largest cost of a Memory call. So
// a stored record is a small struct of the fields the store's rules read (state, times, the
// lease, the intent) and one pointer-free byte slice that packs everything else (about 550
// bytes and three objects in all); a Record is rebuilt only for a caller that reads one back
// (Get, List, claims): rare next to Create and the final write.

// memRecord is a stored record. Scope and Key are the map key. The lease fields are changed
// in place by Claim, Renew and Release. A terminal record is never modified otherwise (an
// Update stores a new memRecord): the finished log tells its versions apart by pointer. A
// pending one, which the log does not list, is updated in place.
type memRecord struct {
	intent     string
	state      State
	createdAt  time.Time
	updatedAt  time.Time
	owner      string
	leaseUntil time.Time
	fence      int64
	packed     []byte // fingerprint, request, attempts, status, texts, response: see pack
}

// newMemRecord is the stored form of rec, by StoredCopy's rules: no credentials, no
// Set-Cookie in a response. scratch is a buffer to pack into, reused across calls.
func newMemRecord(rec *Record, scratch *[]byte) *memRecord {
	mr := new(memRecord)
	mr.set(rec, scratch)
	return mr
}

// set makes mr the stored form of rec (see newMemRecord).
func (mr *memRecord) set(rec *Record, scratch *[]byte) {
	b := pack((*scratch)[:0], rec)
	*mr = memRecord{intent: rec.Intent, state: rec.State, createdAt: rec.CreatedAt, updatedAt: rec.UpdatedAt,
		owner: rec.Owner, leaseUntil: rec.LeaseUntil, fence: rec.Fence, packed: bytes.Clone(b)}
	if cap(b) <= maxScratch { // one huge body must not stay allocated for the store's life
		*scratch = b
	}
}

// maxScratch is the largest packing buffer (bytes) Memory keeps between writes.
const maxScratch = 64 << 10

// rules returns the fields the backend rules read (CheckImmutable, Purgeable, the lease
// rules) as a Record under k; every other field is left zero, Fingerprint included.
func (mr *memRecord) rules(k scopedName) Record {
	return Record{Scope: k.scope, Key: k.name, Intent: mr.intent, State: mr.state,
		CreatedAt: mr.createdAt, UpdatedAt: mr.updatedAt,
		Owner: mr.owner, LeaseUntil: mr.leaseUntil, Fence: mr.fence}
}

// setLease stores the lease fields of r, which a lease rule changed.
func (mr *memRecord) setLease(r *Record) {
	mr.owner, mr.leaseUntil, mr.fence = r.Owner, r.LeaseUntil, r.Fence
}

// purgeable is Purgeable for the stored record.
func (mr *memRecord) purgeable(cutoff time.Time) bool {
	return Purgeable(&Record{State: mr.state, UpdatedAt: mr.updatedAt}, cutoff)
}

// fingerprintFor returns the stored fingerprint, as want itself when they are equal (no
// allocation: the common case of an Update that keeps it).
func (mr *memRecord) fingerprintFor(want string) string {
	u := unpacker{b: mr.packed}
	if u.sameFingerprint(want) {
		return want
	}
	u = unpacker{b: mr.packed}
	return u.fingerprint()
}

// export returns a deep copy of the record stored under k, for a caller.
func (mr *memRecord) export(k scopedName) *Record {
	if mr == nil {
		return nil
	}
	rec := mr.rules(k)
	u := unpacker{b: mr.packed}
	rec.Fingerprint = u.fingerprint()
	rec.Request.Method = u.word()
	rec.Request.URL = u.string()
	rec.Request.Header = u.header()
	rec.Request.Body = u.body()
	rec.Attempts = int(u.varint())
	rec.LastStatusCode = int(u.varint())
	rec.Reason = u.string()
	rec.Error = u.string()
	rec.Note = u.string()
	rec.NotExecuted = u.uvarint() == 1
	if u.uvarint() == 1 {
		rec.Response = &Response{StatusCode: int(u.varint())}
		rec.Response.Header = u.header()
		rec.Response.Body = u.body()
	}
	return &rec
}

// pack appends the packed form of what memRecord does not hold as fields to b.
func pack(b []byte, rec *Record) []byte {
	b = appendFingerprint(b, rec.Fingerprint)
	b = appendWord(b, rec.Request.Method)
	b = appendString(b, rec.Request.URL)
	b = appendHeader(b, rec.Request.Header, CredentialHeaders)
	b = appendBytes(b, rec.Request.Body)
	b = binary.AppendVarint(b, int64(rec.Attempts))
	b = binary.AppendVarint(b, int64(rec.LastStatusCode))
	b = appendString(b, rec.Reason)
	b = appendString(b, rec.Error)
	b = appendString(b, rec.Note)
	b = appendBool(b, rec.NotExecuted)
	b = appendBool(b, rec.Response != nil)
	if r := rec.Response; r != nil {
		b = binary.AppendVarint(b, int64(r.StatusCode))
		b = appendHeader(b, r.Header, CredentialHeaders, ResponseSecretHeaders)
		b = appendBytes(b, r.Body)
	}
	return b
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// A fingerprint is hex SHA-256 as Fingerprint makes it: 64 lowercase hex digits, packed as
// their 32 bytes after a 1. Any other string is kept as it is, after a 0.
func appendFingerprint(b []byte, fp string) []byte {
	if isHexDigest(fp) {
		b = append(b, 1)
		for i := 0; i < len(fp); i += 2 {
			b = append(b, unhex(fp[i])<<4|unhex(fp[i+1]))
		}
		return b
	}
	return appendString(append(b, 0), fp)
}

// unhex is the value of a lowercase hex digit.
func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}

func isHexDigest(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// The packed form, in pack's order: the fingerprint, then strings, headers, bodies and
// numbers. A header is uvarint(number of names), then per name the name and uvarint(values+1)
// (0 for a nil slice, which net/http's Header.Clone keeps apart from an empty one) and the
// values; a string or body is uvarint(length) and its bytes (an empty body reads back as nil,
// as cloneBytes makes it); a bool is one byte, 0 or 1; an int is a varint.

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
		b = appendWord(b, k)
		if vs == nil {
			b = binary.AppendUvarint(b, 0)
			continue
		}
		b = binary.AppendUvarint(b, uint64(len(vs))+1)
		for _, v := range vs {
			b = appendWord(b, v)
		}
	}
	return b
}

// Header names, common values and methods are packed as words: one byte for a word of
// commonWords (the names and values most API answers carry), else the string itself. A
// record's headers shrink by half, and reading one back allocates nothing for them.
var commonWords = []string{
	http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete,
	"Content-Type", "Content-Length", "Date", "Server", "Vary", "Connection", "Cache-Control",
	"Content-Encoding", "Etag", "Location", "Retry-After", "Idempotency-Key", "Idempotent-Replayed",
	"Original-Request", "Request-Id", "X-Request-Id", "Accept", "Accept-Encoding", "User-Agent",
	"Strict-Transport-Security", "X-Content-Type-Options", "Access-Control-Allow-Origin",
	"Access-Control-Allow-Credentials", "Access-Control-Allow-Methods", "Access-Control-Expose-Headers",
	"Access-Control-Max-Age", "Content-Security-Policy", "Stripe-Version",
	"application/json", "application/json; charset=utf-8", "application/problem+json",
	"text/plain; charset=utf-8", "text/html; charset=utf-8", "gzip", "nosniff", "keep-alive",
	"close", "no-store", "no-cache", "no-cache, no-store", "*", "true", "false", "Origin",
	"Accept-Encoding, Origin",
}

var commonWordIndex = func() map[string]uint64 {
	m := make(map[string]uint64, len(commonWords))
	for i, w := range commonWords {
		m[w] = uint64(i)
	}
	return m
}()

// appendWord writes uvarint(index<<1 | 1) for a common word, else uvarint(length<<1) and
// the bytes.
func appendWord(b []byte, s string) []byte {
	if i, ok := commonWordIndex[s]; ok {
		return binary.AppendUvarint(b, i<<1|1)
	}
	b = binary.AppendUvarint(b, uint64(len(s))<<1)
	return append(b, s...)
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

// word reads what appendWord wrote.
func (u *unpacker) word() string {
	x := u.uvarint()
	if x&1 == 1 {
		if i := x >> 1; i < uint64(len(commonWords)) {
			return commonWords[i]
		}
		u.b = nil
		return ""
	}
	n := x >> 1
	if n > uint64(len(u.b)) {
		u.b = nil
		return ""
	}
	w := string(u.b[:n])
	u.b = u.b[n:]
	return w
}

func (u *unpacker) body() []byte   { return cloneBytes(u.view()) }
func (u *unpacker) string() string { return string(u.view()) }

func (u *unpacker) fingerprint() string {
	switch u.uvarint() {
	case 1:
		if len(u.b) < sha256.Size {
			u.b = nil
			return ""
		}
		fp := hex.EncodeToString(u.b[:sha256.Size])
		u.b = u.b[sha256.Size:]
		return fp
	case 0:
		return u.string()
	}
	u.b = nil
	return ""
}

// sameFingerprint reports whether the next packed fingerprint is fp, without allocating,
// and reads past it when it is.
func (u *unpacker) sameFingerprint(fp string) bool {
	switch u.uvarint() {
	case 1:
		if !isHexDigest(fp) || len(u.b) < sha256.Size {
			return false
		}
		for i := range sha256.Size {
			if u.b[i] != unhex(fp[2*i])<<4|unhex(fp[2*i+1]) {
				return false
			}
		}
		u.b = u.b[sha256.Size:]
		return true
	case 0:
		return string(u.view()) == fp
	}
	return false
}

// header rebuilds a fresh http.Header (nil if it had no names).
func (u *unpacker) header() http.Header {
	n := u.uvarint()
	if n == 0 || n > uint64(len(u.b)) { // every name takes at least one byte
		return nil
	}
	h := make(http.Header, n)
	for range n {
		name := u.word()
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
			vs[i] = u.word()
		}
		h[name] = vs
	}
	return h
}
