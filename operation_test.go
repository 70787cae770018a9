package idem

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/outcome"
)

// opVisibleASCII returns n bytes cycling through every visible ASCII character 0x21..0x7e.
func opVisibleASCII(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(0x21 + i%(0x7e-0x21+1))
	}
	return string(b)
}

func TestNewOperationMintsUUIDv7(t *testing.T) {
	body := []byte(`{"amount":500}`)
	a := NewOperation(http.MethodPost, "/v1/payments", body)
	b := NewOperation(http.MethodPost, "/v1/payments", body)
	for _, op := range []*Operation{a, b} {
		id, err := uuid.Parse(op.Key())
		require.NoError(t, err, op.Key())
		assert.Equal(t, uuid.Version(7), id.Version())
		assert.Equal(t, uuid.RFC4122, id.Variant())
		assert.Equal(t, id.String(), op.Key(), "canonical lower-case form")
		require.NoError(t, op.validate())
	}
	assert.NotEqual(t, a.Key(), b.Key(), "two intents with identical payloads get two keys")

	// Keys minted one after another increase (the keystores' B-trees append), and never repeat.
	prev := b.Key()
	for range 1000 {
		k := NewOperation(http.MethodPost, "/v1/payments", body).Key()
		require.Greater(t, k, prev, "keys must increase")
		prev = k
	}
}

func TestNewOperationAccessors(t *testing.T) {
	op := NewOperation(http.MethodPut, "https://api.example.com/v1/x?y=1", []byte("b"),
		WithKey("k-1"), WithIntent("order-42"), WithTenant("acme"))
	assert.Equal(t, "k-1", op.Key())
	assert.Equal(t, http.MethodPut, op.Method())
	assert.Equal(t, "https://api.example.com/v1/x?y=1", op.URL())
	assert.Equal(t, "order-42", op.Intent())
	assert.Equal(t, "acme", op.tenant)
	assert.True(t, op.hasTen)
	assert.Equal(t, []byte("b"), op.Body())
	assert.Equal(t, http.Header{}, op.Header())

	noTenant := NewOperation(http.MethodGet, "/x", nil)
	assert.False(t, noTenant.hasTen)
	assert.Empty(t, noTenant.Intent())
	assert.Nil(t, noTenant.Body())

	emptyTenant := NewOperation(http.MethodGet, "/x", nil, WithTenant(""))
	assert.True(t, emptyTenant.hasTen, "an explicit empty tenant is still an override")
}

func TestOperationValidate(t *testing.T) {
	tests := []struct {
		name    string
		method  string
		url     string
		opts    []OperationOption
		wantErr bool
	}{
		{"minted key", "POST", "/v1/payments", nil, false},
		{"simple key", "POST", "/v1/payments", []OperationOption{WithKey("order-42_retry.1")}, false},
		{"255 visible ASCII", "POST", "/v1/payments", []OperationOption{WithKey(opVisibleASCII(255))}, false},
		{"one byte", "POST", "/v1/payments", []OperationOption{WithKey("!")}, false},
		{"tilde", "POST", "/v1/payments", []OperationOption{WithKey("~")}, false},
		{"absolute URL", "GET", "https://api.example.com/v1/payments/p1", nil, false},
		{"nil option ignored", "POST", "/v1/payments", []OperationOption{nil, WithKey("k"), nil}, false},

		{"256 bytes", "POST", "/v1/payments", []OperationOption{WithKey(opVisibleASCII(256))}, true},
		{"space", "POST", "/v1/payments", []OperationOption{WithKey("a b")}, true},
		{"leading space", "POST", "/v1/payments", []OperationOption{WithKey(" ab")}, true},
		{"tab", "POST", "/v1/payments", []OperationOption{WithKey("a\tb")}, true},
		{"control char", "POST", "/v1/payments", []OperationOption{WithKey("a\x01b")}, true},
		{"NUL", "POST", "/v1/payments", []OperationOption{WithKey("a\x00")}, true},
		{"DEL", "POST", "/v1/payments", []OperationOption{WithKey("a\x7f")}, true},
		{"newline (header injection)", "POST", "/v1/payments", []OperationOption{WithKey("k\r\nX-Evil: 1")}, true},
		{"non-ASCII", "POST", "/v1/payments", []OperationOption{WithKey("clé")}, true},
		{"invalid UTF-8", "POST", "/v1/payments", []OperationOption{WithKey("k\xff")}, true},

		{"empty method", "", "/v1/payments", nil, true},
		{"method with space", "PO ST", "/v1/payments", nil, true},
		{"method with newline", "POST\n", "/v1/payments", nil, true},
		{"method with tab", "\tPOST", "/v1/payments", nil, true},
		{"empty URL", "POST", "", nil, true},
		{"unparsable URL", "POST", "http://[::1", nil, true},
		{"bad escape in URL", "POST", "/v1/%zz", nil, true},
		{"control char in URL", "POST", "/v1/\x7fpayments", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := NewOperation(tt.method, tt.url, nil, tt.opts...).validate()
			if !tt.wantErr {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidOperation)
		})
	}
}

// WithKey documents that an invalid key, the empty one included, makes Do fail with
// ErrInvalidOperation. An empty key must not silently become a fresh random key: a caller
// passing a stored key that happens to be empty would lose idempotency across restarts.
func TestWithKeyEmptyIsRejected(t *testing.T) {
	op := NewOperation(http.MethodPost, "/v1/payments", nil, WithKey(""))
	err := op.validate()
	assert.ErrorIs(t, err, ErrInvalidOperation, "WithKey(\"\") gave key %q", op.Key())
}

func TestOperationValidateNil(t *testing.T) {
	var op *Operation
	assert.ErrorIs(t, op.validate(), ErrInvalidOperation)
}

func TestOperationValidateOptionError(t *testing.T) {
	cause := errors.New("entropy exhausted")
	op := NewOperation(http.MethodPost, "/v1/payments", nil, func(o *Operation) { o.err = cause })
	err := op.validate()
	assert.ErrorIs(t, err, ErrInvalidOperation)
	assert.ErrorIs(t, err, cause)
}

func TestValidateKey(t *testing.T) {
	require.NoError(t, ValidateKey(opVisibleASCII(maxKeyLength)))
	assert.Equal(t, 255, maxKeyLength)
	for _, k := range []string{"", opVisibleASCII(256), " ", "\x20", "\x7f", "\x80", "ü", ".", ".."} { // dot segments: never in a status path
		err := ValidateKey(k)
		assert.ErrorIs(t, err, ErrInvalidOperation, "%q", k)
	}
	for c := 0; c < 256; c++ {
		err := ValidateKey("a" + string([]byte{byte(c)}))
		if c >= 0x21 && c <= 0x7e {
			assert.NoError(t, err, "byte 0x%02x", c)
		} else {
			assert.ErrorIs(t, err, ErrInvalidOperation, "byte 0x%02x", c)
		}
	}
}

func TestNewOperationCopiesBody(t *testing.T) {
	body := []byte(`{"amount":500}`)
	op := NewOperation(http.MethodPost, "/v1/payments", body)
	body[2] = 'X'
	assert.Equal(t, []byte(`{"amount":500}`), op.Body(), "caller's slice mutated after NewOperation")

	got := op.Body()
	got[0] = 'Y'
	assert.Equal(t, []byte(`{"amount":500}`), op.Body(), "Body() returns a copy")

	assert.Nil(t, NewOperation(http.MethodPost, "/x", nil).Body())
	assert.Empty(t, NewOperation(http.MethodPost, "/x", []byte{}).Body())
}

func TestWithHeader(t *testing.T) {
	h := http.Header{"X-Request-Source": {"batch"}, "accept": {"application/json"}}
	op := NewOperation(http.MethodPost, "/v1/payments", nil,
		WithHeader(h),
		WithHeader(http.Header{"X-Request-Source": {"retry"}, "Authorization": {"Bearer t"}}))
	got := op.Header()
	assert.Equal(t, []string{"batch", "retry"}, got.Values("X-Request-Source"), "WithHeader adds, it does not replace")
	assert.Equal(t, []string{"application/json"}, got["Accept"], "names are canonicalised")
	assert.Equal(t, "Bearer t", got.Get("Authorization"))

	h.Set("X-Request-Source", "changed")
	assert.Equal(t, "batch", op.Header().Get("X-Request-Source"), "the caller's header is copied")

	got.Set("X-Request-Source", "mutated")
	assert.Equal(t, "batch", op.Header().Get("X-Request-Source"), "Header() returns a copy")

	assert.Equal(t, http.Header{}, NewOperation(http.MethodPost, "/x", nil, WithHeader(nil)).Header())
}

// fpReference builds the documented fingerprint input by hand: for method, path and body,
// an 8-byte big-endian length followed by the bytes, then hex SHA-256.
func fpReference(method, path string, body []byte) string {
	var in []byte
	for _, p := range [][]byte{[]byte(method), []byte(path), body} {
		in = binary.BigEndian.AppendUint64(in, uint64(len(p)))
		in = append(in, p...)
	}
	sum := sha256.Sum256(in)
	return hex.EncodeToString(sum[:])
}

func TestFingerprint(t *testing.T) {
	fp := Fingerprint("POST", "/v1/payments", []byte(`{"amount":500}`))
	assert.Len(t, fp, 64)
	assert.Equal(t, strings.ToLower(fp), fp)
	assert.Equal(t, fp, Fingerprint("POST", "/v1/payments", []byte(`{"amount":500}`)), "deterministic")
	assert.Equal(t, fpReference("POST", "/v1/payments", []byte(`{"amount":500}`)), fp,
		"persisted fingerprints must not change format")
	// Golden value: a changed encoding would refuse every key persisted before it.
	assert.Equal(t, fpReference("", "", nil), Fingerprint("", "", nil))
	assert.Equal(t, "9d908ecfb6b256def8b49a7c504e6c889c4b0e41fe6ce3e01863dd7b61a20aa0", Fingerprint("", "", nil))
	assert.Equal(t, "fa476740a8ad927ac7e66d7e9c044a4f6616412d1128fb0f01fa0967bee09d21", fp)

	distinct := []struct{ method, path, body string }{
		{"POST", "/v1/payments", `{"amount":500}`},
		{"PUT", "/v1/payments", `{"amount":500}`},
		{"POST", "/v1/payments/", `{"amount":500}`},
		{"POST", "/v1/payments?x=1", `{"amount":500}`},
		{"POST", "/v1/payments", `{"amount":501}`},
		{"POST", "/v1/payments", `{"amount":500} `},
		{"POST", "/v1/payments", ``},
		// boundary shifts that a plain concatenation would confuse
		{"ab", "c", ""},
		{"a", "bc", ""},
		{"", "abc", ""},
		{"abc", "", ""},
		{"", "", "abc"},
		{"a", "", "bc"},
		{"", "a", "bc"},
		{"", "ab", "c"},
	}
	seen := map[string]int{}
	for i, d := range distinct {
		fp := Fingerprint(d.method, d.path, []byte(d.body))
		if j, dup := seen[fp]; dup {
			t.Errorf("fingerprint collision between %+v and %+v", distinct[j], d)
		}
		seen[fp] = i
	}
	assert.NotEqual(t, Fingerprint("ab", "c", nil), Fingerprint("a", "bc", nil))
	assert.Equal(t, Fingerprint("POST", "/x", nil), Fingerprint("POST", "/x", []byte{}),
		"nil and empty body are the same request")
}

func TestSFString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", `""`},
		{"abc", `"abc"`},
		{"8e03978e-40d5-43e8-bc93-6894a57f9324", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`},
		{`a"b`, `"a\"b"`},
		{`a\b`, `"a\\b"`},
		{`"\`, `"\"\\"`},
		{`\"`, `"\\\""`},
		{`it's`, `"it's"`},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, sfString(tt.in), "%q", tt.in)
	}
}

// One intent written several ways is one fingerprint; a normal relative URL keeps the
// fingerprint it had before normalisation (records persisted then stay valid).
func TestFingerprintTarget(t *testing.T) {
	c, err := NewClient(Config{BaseURL: "https://api.example.com/"})
	require.NoError(t, err)
	bare, err := NewClient(Config{})
	require.NoError(t, err)
	v2, err := NewClient(Config{BaseURL: "https://API.example.com/v2/"})
	require.NoError(t, err)
	for _, tc := range []struct {
		c    *Client
		ref  string
		want string
	}{
		{c, "/v1/payments", "/v1/payments"},
		{c, "/v1/payments?x=1&y=2", "/v1/payments?x=1&y=2"},
		{c, "v1/payments", "/v1/payments"},
		{c, "//v1/payments", "/v1/payments"},
		{c, "/v1/payments?", "/v1/payments"},
		{c, "/v1/payments#frag", "/v1/payments"},
		{c, "/v1/payments?#frag", "/v1/payments"},
		{c, "/v1/payments?x=1#frag", "/v1/payments?x=1"},
		{c, "https://api.example.com/v1/payments", "/v1/payments"},
		{c, "https://api.example.com/v1/payments?a=%2F", "/v1/payments?a=%2F"},
		{c, "https://api.example.com", "/"},
		{c, "https://api.example.com?x=1", "/?x=1"},
		{c, "HTTPS://API.Example.COM/v1/payments", "/v1/payments"},
		{c, "?x=1", "/?x=1"},
		{c, "", "/"},
		{c, "/v1/payments?a=?", "/v1/payments?a=?"},
		// Requests that differ on the wire keep different targets.
		{c, "https://api.example.com//v1/payments", "//v1/payments"},
		{c, "https://other.example.com:8443/v1/payments#x", "https://other.example.com:8443/v1/payments"},
		{c, "https://api.example.com.evil.test/v1/payments", "https://api.example.com.evil.test/v1/payments"},
		{c, "http://api.example.com/v1/payments", "http://api.example.com/v1/payments"},
		{c, "/v1//payments", "/v1//payments"},
		{c, "/v1/payments/", "/v1/payments/"},
		{c, "/v1/pay%20ments", "/v1/pay%20ments"},
		{bare, "http://127.0.0.1:8080/v1/payments?", "http://127.0.0.1:8080/v1/payments"},
		{bare, "HTTPS://API.EXAMPLE.COM/v1/payments", "https://api.example.com/v1/payments"},
		{bare, "https://api.example.com", "https://api.example.com/"},
		{bare, "https://api.example.com?x=1", "https://api.example.com/?x=1"},
		{bare, "/v1/payments", "/v1/payments"}, // never sent: no base
		// A base with a path: only URLs under it lose it.
		{v2, "/payments", "/payments"},
		{v2, "https://api.example.com/v2/payments", "/payments"},
		{v2, "https://api.example.com/v1/payments", "https://api.example.com/v1/payments"},
		{v2, "https://api.example.com/v2", "https://api.example.com/v2"},
		{v2, "https://api.example.com/v2x/payments", "https://api.example.com/v2x/payments"},
	} {
		assert.Equal(t, tc.want, tc.c.target(tc.ref), tc.ref)
	}
	// Golden: the fingerprint of a normal relative URL is the one persisted before.
	fp, asWritten := c.fingerprint(NewOperation("POST", "/v1/payments", []byte(`{"amount":500}`)))
	assert.Equal(t, "fa476740a8ad927ac7e66d7e9c044a4f6616412d1128fb0f01fa0967bee09d21", fp)
	assert.Equal(t, fp, asWritten)
	abs, _ := c.fingerprint(NewOperation("POST", "https://api.example.com/v1/payments#x", []byte(`{"amount":500}`)))
	assert.Equal(t, fp, abs)
	other, _ := c.fingerprint(NewOperation("POST", "/v1/payments/", []byte(`{"amount":500}`)))
	assert.NotEqual(t, fp, other)
}

// End to end: a key first used with a relative URL is the same request when written
// absolute under the base (replayed from the record, not sent again), and another request
// when the URL leaves the base.
func TestFingerprintTargetDo(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, nil)
	body := paymentBody(700, "order-fp")
	first := NewOperation(http.MethodPost, "/v1/payments", body, WithKey("key-fp-1"))
	_, err := e.c.Do(context.Background(), first)
	require.NoError(t, err)
	again := NewOperation(http.MethodPost, e.srv.URL+"/v1/payments#x", body, WithKey("key-fp-1"))
	res, err := e.c.Do(context.Background(), again)
	require.NoError(t, err)
	assert.Equal(t, outcome.SourceStore, res.Source)
	assert.Equal(t, 1, e.srv.ExecutionsFor("key-fp-1"))
	other := NewOperation(http.MethodPost, e.srv.URL+"//v1/payments", body, WithKey("key-fp-1"))
	_, err = e.c.Do(context.Background(), other)
	require.ErrorIs(t, err, ErrKeyConflict)
	assert.Equal(t, 1, e.srv.ExecutionsFor("key-fp-1"))
}

// Header is never nil and always a copy, for an operation with headers, without, and the
// zero Operation; WithHeader applied to a zero Operation does not panic.
func TestOperationHeaderNeverNil(t *testing.T) {
	with := NewOperation(http.MethodPost, "/v1/payments", nil, WithHeader(http.Header{"X-A": {"1"}}))
	for name, op := range map[string]*Operation{
		"with headers": with,
		"without":      NewOperation(http.MethodPost, "/v1/payments", nil),
		"zero":         {},
	} {
		h := op.Header()
		require.NotNil(t, h, name)
		h.Set("X-Added", "1")
		require.Empty(t, op.Header().Get("X-Added"), name)
	}
	require.Equal(t, "1", with.Header().Get("X-A"))
	zero := &Operation{}
	require.NotPanics(t, func() { WithHeader(http.Header{"X-B": {"2"}})(zero) })
	require.Equal(t, "2", zero.Header().Get("X-B"))
}
