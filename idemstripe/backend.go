package idemstripe

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/idemkit/idem"
	"github.com/stripe/stripe-go/v82"
)

// backend wraps a stripe-go backend (retries off, HTTP client over idem) to tell the
// transport which Idempotency-Key stripe-go minted itself, and to turn idem's errors into
// *Error.
type backend struct {
	b stripe.Backend
}

// errorDecoder is stripe-go's *BackendImplementation: it decodes a Stripe v1 error body as
// that backend does (the Connect backend's OAuth errors differ).
type errorDecoder interface {
	ResponseToError(res *http.Response, resBody []byte) error
}

func newBackend(t stripe.SupportedBackend, hc *http.Client, url *string, logger stripe.LeveledLoggerInterface) *backend {
	return &backend{b: stripe.GetBackendWithConfig(t, &stripe.BackendConfig{
		HTTPClient:        hc,
		MaxNetworkRetries: stripe.Int64(0), // idem's policy alone decides
		URL:               url,
		LeveledLogger:     logger,
	})}
}

// mintedKey marks a request context whose Idempotency-Key, if any, was minted by stripe-go
// (the caller set none): keyTransport drops it, so that idem sends the intent's key or its own.
type mintedKey struct{}

// mark makes p's context say that stripe-go mints the key, when the caller set none, and
// returns the function that restores p. stripe-go's services set p.Context on every call
// themselves; it is restored so that a params value reused with a caller's key later is not
// misread.
func mark(p *stripe.Params) (restore func()) {
	if p == nil || p.IdempotencyKey != nil || hasKeyHeader(p.Headers) {
		return func() {}
	}
	orig := p.Context
	ctx := orig
	if ctx == nil {
		ctx = context.Background()
	}
	p.Context = context.WithValue(ctx, mintedKey{}, true)
	return func() { p.Context = orig }
}

func hasKeyHeader(h http.Header) bool {
	for name := range h {
		if strings.EqualFold(name, KeyHeader) {
			return true
		}
	}
	return false
}

func params(c stripe.ParamsContainer) *stripe.Params {
	if c == nil {
		return nil
	}
	defer func() { _ = recover() }() // a typed nil whose GetParams dereferences it
	return c.GetParams()
}

func (b *backend) Call(method, path, key string, p stripe.ParamsContainer, v stripe.LastResponseSetter) error {
	defer mark(params(p))()
	return b.wrap(path, b.b.Call(method, path, key, p, v))
}

func (b *backend) CallStreaming(method, path, key string, p stripe.ParamsContainer, v stripe.StreamingLastResponseSetter) error {
	defer mark(params(p))()
	return b.wrap(path, b.b.CallStreaming(method, path, key, p, v))
}

func (b *backend) CallRaw(method, path, key string, body []byte, p *stripe.Params, v stripe.LastResponseSetter) error {
	defer mark(p)()
	return b.wrap(path, b.b.CallRaw(method, path, key, body, p, v))
}

func (b *backend) CallMultipart(method, path, key, boundary string, body *bytes.Buffer, p *stripe.Params, v stripe.LastResponseSetter) error {
	defer mark(p)()
	return b.wrap(path, b.b.CallMultipart(method, path, key, boundary, body, p, v))
}

// SetMaxNetworkRetries is ignored: stripe-go's retries stay off, idem's policy bounds the sends.
func (b *backend) SetMaxNetworkRetries(int64) {}

// RawRequest passes stripe-go's raw requests through (the RawRequestBackend interface).
func (b *backend) RawRequest(method, path, key, content string, p *stripe.RawParams) (*stripe.APIResponse, error) {
	rb, ok := b.b.(stripe.RawRequestBackend)
	if !ok {
		return nil, errors.New("idemstripe: the stripe-go backend does not support raw requests")
	}
	var pp *stripe.Params
	if p != nil {
		pp = &p.Params
	}
	defer mark(pp)()
	resp, err := rb.RawRequest(method, path, key, content, p)
	return resp, b.wrap(path, err)
}

// wrap turns an error that carries an *idem.OperationError (stripe-go hands back the
// transport's error in a *url.Error) into an *Error, with Stripe's answer decoded when the
// operation has one with a Stripe v1 error body.
func (b *backend) wrap(path string, err error) error {
	var oe *idem.OperationError
	if err == nil || !errors.As(err, &oe) {
		return err
	}
	e := &Error{Op: oe, Err: err}
	if r := oe.Response; r != nil && len(r.Body) > 0 && !strings.HasPrefix(path, "/v2/") {
		if d, ok := b.b.(errorDecoder); ok {
			h := r.Header.Clone()
			if h == nil {
				h = http.Header{}
			}
			res := &http.Response{StatusCode: r.StatusCode, Status: http.StatusText(r.StatusCode), Header: h}
			var se *stripe.Error
			if errors.As(d.ResponseToError(res, r.Body), &se) {
				e.Stripe = se
			}
		}
	}
	return e
}

// keyTransport drops the Idempotency-Key stripe-go minted (the request context says so, see
// mark) from a request idem sends as an operation, so that idem sends the intent's
// persisted key or mints its own. A key the caller set passes unchanged, and idem adopts it.
type keyTransport struct {
	next http.RoundTripper
}

func (t *keyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Context().Value(mintedKey{}) != nil && operation(req.Method) && req.Header.Get(KeyHeader) != "" {
		r := req.Clone(req.Context())
		r.Header.Del(KeyHeader)
		req = r
	}
	return t.next.RoundTrip(req)
}

// operation reports whether idem's Transport sends method as an operation (with a key and a
// record): every method but GET, HEAD, OPTIONS, TRACE, PUT and DELETE. The others are sent
// as they are, stripe-go's key included (Stripe's DELETE is idempotent anyway).
func operation(method string) bool {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return false
	}
	return true
}
