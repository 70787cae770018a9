package idem

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
)

// maxKeyLength is the longest idempotency key accepted, in bytes (IETF Idempotency-Key
// draft; Stripe documents the same limit).
const maxKeyLength = 255

// MaxIntentLength and maxTenantLength (255) are the longest intent and tenant (Config.Tenant or
// WithTenant) of a new record, in bytes. Keystores index them (a bbolt key holds at most
// 32 KiB, a PostgreSQL btree entry about 2.7 KiB), so a longer one might not be persisted:
// Do refuses to create such a record, with ErrInvalidOperation, before anything is written.
// A record persisted before these limits existed is still found and continued.
const (
	MaxIntentLength = 1024
	maxTenantLength = 255
)

// Operation is one user intent: a request that must be executed at most once. It carries the
// idempotency key that every attempt of the intent reuses. Create it with NewOperation; it
// is immutable afterwards and safe to share between goroutines.
type Operation struct {
	method string
	url    string
	header http.Header
	body   []byte
	key    string
	hasKey bool // WithKey was given: never mint, even for ""
	// keyBound: the key must be the intent's, if the intent has one persisted (a Transport
	// request's key header); Do refuses another under the intent lock.
	keyBound bool
	intent   string
	tenant   string
	hasTen   bool
	err      error // from an option; Do returns it
}

// OperationOption configures an Operation in NewOperation.
type OperationOption func(*Operation)

// WithKey uses key instead of minting a new UUIDv7. The key must be 1 to 255
// visible ASCII characters (0x21-0x7E); otherwise Do returns an error matching
// ErrInvalidOperation. Reuse a key only for the same intent: never derive it from a payload
// hash, since two identical payments are two intents.
func WithKey(key string) OperationOption {
	return func(o *Operation) { o.key, o.hasKey = key, true }
}

// withBoundKey is WithKey for a key the caller chose for this request (a Transport's key
// header): if the intent already has another key persisted, Do returns ErrKeyConflict rather
// than continue that key in its place.
func withBoundKey(key string) OperationOption {
	return func(o *Operation) { o.key, o.hasKey, o.keyBound = key, true, true }
}

// WithIntent names the caller's intent (an order id, a booking reference). If a record for
// this intent already exists in the scope (for instance persisted by a process that crashed),
// Do continues that operation with its persisted key instead of the one minted here, and a
// finished one answers from the store, sending nothing. The intent is remembered as long as
// its record: until Config.Retention (72 h by default) after it finished; a Do of the same
// intent after that is a new payment under a new key. At most MaxIntentLength bytes of UTF-8
// for a new record, else Do returns ErrInvalidOperation.
func WithIntent(intent string) OperationOption {
	return func(o *Operation) { o.intent = intent }
}

// WithTenant scopes the key to a tenant, overriding Config.Tenant for this operation. At most
// 255 bytes of UTF-8 for a new record, else Do returns ErrInvalidOperation.
func WithTenant(tenant string) OperationOption {
	return func(o *Operation) { o.tenant, o.hasTen = tenant, true }
}

// WithHeader adds request headers sent on every attempt (values are added, as Header.Add
// does, so two WithHeader options with one name send both values). Credential headers
// (Authorization, Cookie, Proxy-Authorization, Config.SecretHeaders) are sent but never
// persisted; after a restart Config.Credentials must supply them again. A header named like
// Config.KeyHeader (any letter case) becomes the operation's key when Do runs, validated like
// WithKey: Do returns ErrInvalidOperation if it conflicts with a WithKey key or carries two
// values, and Result.Key and OperationError.Key report it. Key does not: it keeps returning
// the key NewOperation minted, which is then never sent, so log Result.Key.
func WithHeader(h http.Header) OperationOption {
	return func(o *Operation) {
		if o.header == nil { // a zero Operation
			o.header = http.Header{}
		}
		for k, vs := range h {
			for _, v := range vs {
				o.header.Add(k, v)
			}
		}
	}
}

// NewOperation creates an operation for one intent: method and url (relative to
// Config.BaseURL, such as "/v1/payments", or absolute) with body sent byte for byte on every
// attempt (nil for none; the body is copied). Unless WithKey is given it mints a UUIDv7 key
// (RFC 9562 §5.7 and §6.2 method 3: a millisecond Unix timestamp, a 12-bit sub-millisecond
// sequence and 62 bits from crypto/rand; strictly increasing within the process,
// github.com/google/uuid's NewV7).
// Time-ordered keys land at the end of a keystore's B-tree (bbolt, a PostgreSQL index)
// instead of on a random page, so a group commit writes a few pages rather than one per
// key; the timestamp tells the server only when the intent began.
// It never panics: invalid input is reported by Do as ErrInvalidOperation, among it a URL
// with user info ("https://user:pass@host/..."), which would be persisted with the record
// (use Config.Credentials instead). The URL, query string included, is persisted as given:
// never put an API key or a token in it.
func NewOperation(method, url string, body []byte, opts ...OperationOption) *Operation {
	// The header map always exists: a status check's and a lookup's request start from it.
	o := &Operation{method: method, url: url, header: http.Header{}}
	if body != nil {
		o.body = append([]byte(nil), body...)
	}
	for _, opt := range opts {
		if opt != nil {
			opt(o)
		}
	}
	if !o.hasKey {
		id, err := uuid.NewV7()
		if err != nil {
			o.err = fmt.Errorf("minting key: %w", err)
		} else {
			o.key = id.String()
		}
	}
	return o
}

// Key returns the idempotency key of the operation: WithKey's, or the one NewOperation
// minted. Do may use another: a key header given with WithHeader, or an older key persisted
// for the same intent; Result.Key and OperationError.Key report the key actually used.
func (o *Operation) Key() string { return o.key }

// Intent returns the caller-named intent, or "".
func (o *Operation) Intent() string { return o.intent }

// Method returns the HTTP method.
func (o *Operation) Method() string { return o.method }

// URL returns the URL as given to NewOperation.
func (o *Operation) URL() string { return o.url }

// Body returns a copy of the request body.
func (o *Operation) Body() []byte { return append([]byte(nil), o.body...) }

// Header returns a copy of the extra request headers, key header included if one was given;
// never nil (an empty map when there are none).
func (o *Operation) Header() http.Header {
	if o.header == nil {
		return http.Header{}
	}
	return o.header.Clone()
}

func (o *Operation) validate() error {
	_, err := o.check()
	return err
}

// check is validate that also returns the parsed URL, so that Do parses it once; nil for a
// plain relative path (plainPath), which parses without error as a relative URL.
func (o *Operation) check() (*url.URL, error) {
	if o == nil {
		return nil, fmt.Errorf("%w: nil operation", ErrInvalidOperation)
	}
	if o.err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOperation, o.err)
	}
	if err := ValidateKey(o.key); err != nil {
		return nil, err
	}
	if !isToken(o.method) {
		return nil, fmt.Errorf("%w: bad method %q", ErrInvalidOperation, o.method)
	}
	var u *url.URL
	if !plainPath(o.url) { // the common "/v1/payments" needs no parse (and no allocation)
		var err error
		u, err = url.Parse(o.url)
		if err != nil || o.url == "" {
			return nil, fmt.Errorf("%w: bad URL %q", ErrInvalidOperation, o.url)
		}
		if u.User != nil { // the URL is persisted with the record: never a password with it
			return nil, fmt.Errorf("%w: URL carries user info, which would be persisted; use Config.Credentials", ErrInvalidOperation)
		}
		// A path's space is escaped on the wire, a query's is sent as is and breaks the request
		// line (RFC 9112 §3): servers refuse it with 400, which would fail the payment.
		if strings.IndexByte(u.RawQuery, ' ') >= 0 {
			return nil, fmt.Errorf("%w: URL %q has a space in its query; escape it (%%20 or +)", ErrInvalidOperation, o.url)
		}
	}
	if !utf8.ValidString(o.intent) || !utf8.ValidString(o.tenant) {
		return nil, fmt.Errorf("%w: intent and tenant must be valid UTF-8", ErrInvalidOperation)
	}
	for name, values := range o.header {
		if !isToken(name) {
			return nil, fmt.Errorf("%w: bad header name %q", ErrInvalidOperation, name)
		}
		for _, v := range values {
			// CR, LF and NUL can never be sent; other bytes must be UTF-8 so that every
			// keystore can persist them unchanged.
			if strings.ContainsAny(v, "\r\n\x00") || !utf8.ValidString(v) {
				return nil, fmt.Errorf("%w: header %s has a value that cannot be sent or stored", ErrInvalidOperation, name)
			}
		}
	}
	return u, nil
}

// isToken reports whether s is an RFC 9110 §5.6.2 token, which a method must be.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return s != ""
}

// ValidateKey reports whether key is usable as an idempotency key: 1 to 255 bytes of
// visible ASCII (0x21-0x7E), and not "." or ".." (in a status URL's path they are dot
// segments, which no escaping keeps: the key could never be asked about). The error matches
// ErrInvalidOperation.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty idempotency key", ErrInvalidOperation)
	}
	if key == "." || key == ".." {
		return fmt.Errorf("%w: idempotency key %q is a path dot segment", ErrInvalidOperation, key)
	}
	if len(key) > maxKeyLength {
		return fmt.Errorf("%w: idempotency key is %d bytes, at most %d allowed", ErrInvalidOperation, len(key), maxKeyLength)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: idempotency key has byte 0x%02x at %d; only visible ASCII is allowed", ErrInvalidOperation, c, i)
		}
	}
	return nil
}

// Fingerprint returns the hex SHA-256 of the request's method, path (with query) and body
// bytes, each length-prefixed so that no two different requests share an input. A key reused
// with another fingerprint is refused (ErrKeyConflict). It hashes its arguments as given; Do
// first normalises the URL, so that one request written several ways is one fingerprint:
// under Config.BaseURL, "/v1/payments", "v1/payments", "/v1/payments?", "/v1/payments#x" and
// the absolute URL are all hashed as "/v1/payments" (a URL outside the base is hashed
// absolute, scheme and host in lower case). To reproduce Do's fingerprint, pass the URL in
// that form.
func Fingerprint(method, path string, body []byte) string {
	h := sha256.New()
	var n [8]byte
	for _, part := range [][]byte{[]byte(method), []byte(path), body} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	var sum [sha256.Size]byte
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], h.Sum(sum[:0]))
	return string(out[:])
}

// fingerprint returns the fingerprint of op over its normalised target (see target), and
// the one over its URL as written, which records persisted before normalisation carry.
// open computes the second only when a stored record differs from the first.
func (c *Client) fingerprint(op *Operation) (fp, asWritten string) {
	return Fingerprint(op.method, c.target(op.url), op.body), Fingerprint(op.method, op.url, op.body)
}
