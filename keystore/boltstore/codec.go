package boltstore

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
)

// Layout of the file: three top-level buckets.
var (
	bucketMeta    = []byte("meta")    // keySchema -> decimal schema version
	bucketRecords = []byte("records") // scopedKey(scope, key) -> checksum || flags || keystore.Record (binary.go, or JSON)
	bucketIntents = []byte("intents") // scopedKey(scope, intent) -> checksum || key (see checksum.go)
	keySchema     = []byte("schema")
)

// scopedKey returns uvarint(len(scope)) || scope || name. The length prefix makes the
// encoding injective whatever bytes scope holds: ("a", "bc") and ("ab", "c") differ.
func scopedKey(scope, name string) []byte {
	b := make([]byte, 0, binary.MaxVarintLen64+len(scope)+len(name))
	b = binary.AppendUvarint(b, uint64(len(scope)))
	b = append(b, scope...)
	return append(b, name...)
}

// splitScopedKey is the inverse of scopedKey. It refuses a key longer than bbolt allows, which
// only a damaged page can yield, before copying it.
func splitScopedKey(b []byte) (scope, name string, ok bool) {
	if len(b) > bbolt.MaxKeySize {
		return "", "", false
	}
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return "", "", false
	}
	return string(b[w : w+int(n)]), string(b[w+int(n):]), true
}

// encoded is a record ready to be written: everything a commit needs, computed by the caller
// outside the shared write transaction. It shares no memory with the record it was encoded
// from, so a write may be applied after its caller has the record back (UpdateDeferred).
type encoded struct {
	// rec holds the fields of the stored record that a commit checks and indexes by (scope,
	// key, intent, fingerprint, state, times, lease, fence; no headers, bodies or response):
	// value holds the whole record (full). Deep-copying the record for rec cost every write
	// about 1 KB and 6 allocations, for bytes that value already holds.
	rec    *keystore.Record
	key    []byte // records bucket key
	intent []byte // intents bucket key, nil without an intent
	value  []byte // checksum || flags || record, as codec.value makes it
	codec  *codec // what made value, to read it back and make it again (keepLease)
}

// setFields sets e.rec to the fields of r that e.rec holds.
func (e *encoded) setFields(r *keystore.Record) {
	e.rec = &keystore.Record{Scope: r.Scope, Key: r.Key, Intent: r.Intent, Fingerprint: r.Fingerprint,
		State: r.State, Attempts: r.Attempts, LastStatusCode: r.LastStatusCode, Reason: r.Reason,
		NotExecuted: r.NotExecuted, Error: r.Error, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		Owner: r.Owner, LeaseUntil: r.LeaseUntil, Fence: r.Fence, Note: r.Note}
	e.rec.Request.Method, e.rec.Request.URL = r.Request.Method, r.Request.URL
}

// full returns the whole stored record, decoded from e.value: a copy the caller owns.
func (e *encoded) full() (*keystore.Record, error) {
	return e.codec.decode(e.key, e.value)
}

// encode validates rec, strips its secrets and marshals the stored copy. Errors wrap
// keystore.ErrInvalid. The stored copy is a view (storedView) that lives only until value is
// made: what a commit needs of it later is copied into e.rec.
func encode(rec *keystore.Record, secret []string, c *codec) (*encoded, error) {
	if err := rec.Validate(); err != nil {
		return nil, err
	}
	var stored keystore.Record
	storedView(&stored, rec, secret)
	if err := checkUTF8(&stored); err != nil {
		return nil, errors.Join(keystore.ErrInvalid, err)
	}
	e := &encoded{key: scopedKey(rec.Scope, rec.Key), codec: c}
	if rec.Intent != "" {
		e.intent = scopedKey(rec.Scope, rec.Intent)
	}
	if len(e.key) > bbolt.MaxKeySize || len(e.intent) > bbolt.MaxKeySize {
		return nil, errors.Join(keystore.ErrInvalid, fmt.Errorf("scope plus key or intent longer than %d bytes", bbolt.MaxKeySize))
	}
	v, err := c.value(e.key, &stored)
	if err != nil {
		return nil, err
	}
	if len(v) > bbolt.MaxValueSize {
		return nil, errors.Join(keystore.ErrInvalid, fmt.Errorf("encoded record is %d bytes, more than %d", len(v), bbolt.MaxValueSize))
	}
	e.value = v
	e.setFields(&stored)
	return e, nil
}

// storedView sets v to what keystore.StoredCopy returns for rec, without copying what needs
// no change: rec's fields, its header maps unless a secret header must be left out (then a
// new map without it, sharing the value lists), its bodies and, unless its header changes,
// its response. v is read only, and only while encode runs.
func storedView(v, rec *keystore.Record, secret []string) {
	*v = *rec
	v.Request.Header, _ = withoutSecrets(rec.Request.Header, secret, nil)
	if rec.Response != nil {
		if h, changed := withoutSecrets(rec.Response.Header, secret, keystore.ResponseSecretHeaders); changed {
			resp := *rec.Response
			resp.Header = h
			v.Response = &resp
		}
	}
}

// withoutSecrets returns h if it has no header keystore.SecretHeader names (with secret and
// more), else a new map with the other names, their value lists shared with h, and changed
// true.
func withoutSecrets(h http.Header, secret, more []string) (_ http.Header, changed bool) {
	n := 0
	for k := range h {
		if keystore.SecretHeader(k, secret, more) {
			n++
		}
	}
	if n == 0 {
		return h, false
	}
	out := make(http.Header, len(h)-n)
	for k, vs := range h {
		if !keystore.SecretHeader(k, secret, more) {
			out[k] = vs
		}
	}
	return out, true
}

// checkUTF8 refuses strings that JSON cannot carry unchanged: encoding/json replaces invalid
// UTF-8 with U+FFFD, so such a record would not read back as written. The binary encoding
// could carry them, but a record's rules do not depend on how the file encodes it, and the
// other backends (and idemctl's JSON output) need valid text.
func checkUTF8(r *keystore.Record) error {
	for _, f := range [...]struct{ name, s string }{
		{"scope", r.Scope}, {"key", r.Key}, {"intent", r.Intent}, {"fingerprint", r.Fingerprint},
		{"method", r.Request.Method}, {"url", r.Request.URL}, {"reason", r.Reason}, {"error", r.Error},
		{"owner", r.Owner}, {"note", r.Note},
	} {
		if !utf8.ValidString(f.s) {
			return fmt.Errorf("%s is not valid UTF-8", f.name)
		}
	}
	if err := keystore.CheckHeaderText("request", r.Request.Header); err != nil {
		return err
	}
	if r.Response != nil {
		return keystore.CheckHeaderText("response", r.Response.Header)
	}
	return nil
}

// decode checks the checksum of the value stored under k, unmarshals it, checks it against
// its key and opens its sealed bodies. Errors wrap ErrCorrupt, or keystore.ErrKeyUnknown or
// keystore.ErrKeyWrong for sealed bodies that the key ring cannot open. The result shares no
// memory with v, which bbolt owns.
func (c *codec) decode(k, v []byte) (*keystore.Record, error) {
	rec, flags, err := decodeSealed(k, v)
	if err != nil {
		return nil, err
	}
	if flags&flagSealed != 0 {
		if err := c.openBodies(k, rec); err != nil {
			return nil, fmt.Errorf("boltstore: record (%q, %q): %w", rec.Scope, rec.Key, err)
		}
	}
	return rec, nil
}

// decodeSealed is decode without opening the bodies: sealed ones stay sealed (flags says).
// Errors wrap ErrCorrupt.
func decodeSealed(k, v []byte) (*keystore.Record, byte, error) {
	scope, key, ok := splitScopedKey(k)
	if !ok {
		return nil, 0, structural(fmt.Errorf("%w: malformed record key %q", ErrCorrupt, clip(k)))
	}
	flags, v, err := recordBytes(scope, key, k, v)
	if err != nil {
		return nil, 0, err
	}
	var rec *keystore.Record
	if flags&flagBinary != 0 {
		if rec, err = decodeBinary(v, false); err != nil {
			return nil, 0, fmt.Errorf("%w: record (%q, %q): %w", ErrCorrupt, scope, key, err)
		}
	} else {
		rec = new(keystore.Record)
		if err := json.Unmarshal(v, rec); err != nil {
			return nil, 0, jsonError(scope, key, v, err)
		}
	}
	if rec.Scope != scope || rec.Key != key {
		return nil, 0, fmt.Errorf("%w: record stored under (%q, %q) names (%q, %q)", ErrCorrupt, scope, key, rec.Scope, rec.Key)
	}
	if err := rec.Validate(); err != nil {
		return nil, 0, fmt.Errorf("%w: record (%q, %q): %w", ErrCorrupt, scope, key, err)
	}
	return rec, flags, nil
}

// summary is the part of a stored record that Update and Purge inspect inside the shared write
// transaction; decoding only these fields keeps the commit short.
type summary struct {
	Scope       string         `json:"scope"`
	Key         string         `json:"key"`
	Intent      string         `json:"intent"`
	Fingerprint string         `json:"fingerprint"`
	State       keystore.State `json:"state"`
	CreatedAt   time.Time      `json:"created_at"`
	UpdatedAt   time.Time      `json:"updated_at"`
	Owner       string         `json:"owner"`
	LeaseUntil  time.Time      `json:"lease_until"`
	Fence       int64          `json:"fence"`
}

// decodeSummary is decode for the fields in summary. Errors wrap ErrCorrupt.
func decodeSummary(k, v []byte) (*keystore.Record, error) {
	scope, key, ok := splitScopedKey(k)
	if !ok {
		return nil, structural(fmt.Errorf("%w: malformed record key %q", ErrCorrupt, clip(k)))
	}
	flags, v, err := recordBytes(scope, key, k, v)
	if err != nil {
		return nil, err
	}
	if flags&flagBinary != 0 {
		rec, err := decodeBinary(v, true)
		if err != nil {
			return nil, fmt.Errorf("%w: record (%q, %q): %w", ErrCorrupt, scope, key, err)
		}
		if rec.Scope != scope || rec.Key != key {
			return nil, fmt.Errorf("%w: record stored under (%q, %q) names (%q, %q)", ErrCorrupt, scope, key, rec.Scope, rec.Key)
		}
		return rec, nil
	}
	var s summary
	if err := json.Unmarshal(v, &s); err != nil {
		return nil, jsonError(scope, key, v, err)
	}
	if s.Scope != scope || s.Key != key {
		return nil, fmt.Errorf("%w: record stored under (%q, %q) names (%q, %q)", ErrCorrupt, scope, key, s.Scope, s.Key)
	}
	return &keystore.Record{
		Scope: s.Scope, Key: s.Key, Intent: s.Intent, Fingerprint: s.Fingerprint,
		State: s.State, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt,
		Owner: s.Owner, LeaseUntil: s.LeaseUntil, Fence: s.Fence,
	}, nil
}

// jsonError returns the ErrCorrupt error for err, from decoding v, the value of record
// (scope, key). It is structural if the decoder found data after a complete JSON value: then
// the length of the value in its page element is damaged, not the record's contents, and the
// value runs on past its record.
func jsonError(scope, key string, v []byte, err error) error {
	err = fmt.Errorf("%w: record (%q, %q): %w", ErrCorrupt, scope, key, err)
	var se *json.SyntaxError
	if errors.As(err, &se) && se.Offset > 0 && se.Offset <= int64(len(v)) && json.Valid(v[:se.Offset-1]) {
		return structural(err)
	}
	return err
}

// clip returns at most the first 64 bytes of b, for an error message about damaged data.
func clip(b []byte) []byte {
	return b[:min(len(b), 64)]
}
