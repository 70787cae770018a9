package idem

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// A Transport's safe and idempotent requests: no key, no record, but the same bounds as an
// operation's attempts. Each request gets a call without a record (safeCall), so the delays
// and limits are the operation path's own (nextDelay, allow); go-retryablehttp runs the loop.

type safeKey struct{}

// safeCall returns the call a safe request carries in its context, or nil.
func safeCall(ctx context.Context) *call {
	cl, _ := ctx.Value(safeKey{}).(*call)
	return cl
}

// newSafeClient is the Transport's retryablehttp.Client for safe requests, over rt.
func newSafeClient(rt http.RoundTripper, timeout time.Duration) *retryablehttp.Client {
	return &retryablehttp.Client{
		HTTPClient: &http.Client{Transport: safeAttempt{rt}, Timeout: timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		RetryMax:     math.MaxInt32, // the request's Policy.MaxAttempts is checked in safeRetry
		CheckRetry:   safeRetry,
		Backoff:      func(time.Duration, time.Duration, int, *http.Response) time.Duration { return 0 },
		PrepareRetry: safeWait,
		ErrorHandler: retryablehttp.PassthroughErrorHandler,
	}
}

// roundTripSafe sends a safe or idempotent request with retries bounded by its Policy.
func (t *Transport) roundTripSafe(req *http.Request) (*http.Response, error) {
	c := t.Client
	t.once.Do(func() {
		rt := c.http.Transport
		if rt == nil {
			rt = http.DefaultTransport
		}
		t.safe = newSafeClient(rt, c.http.Timeout)
	})
	s, err := c.settings(append(slices.Clip(t.CallOptions), contextValues(req.Context()).opts...))
	if err != nil {
		closeBody(req)
		return nil, err
	}
	body, err := t.readBody(req)
	if err != nil {
		return nil, err
	}
	var raw any // a nil interface, not a nil []byte: no body at all
	if body != nil {
		raw = body
	}
	cl := &call{c: c, s: s, start: c.cfg.Now()}
	ctx := context.WithValue(req.Context(), safeKey{}, cl)
	rreq, err := retryablehttp.NewRequestWithContext(ctx, req.Method, req.URL.String(), raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOperation, err)
	}
	rreq.Header = req.Header.Clone()
	if rreq.Header == nil { // a RoundTrip called directly; http.Client never sends nil
		rreq.Header = http.Header{}
	}
	rreq.Host = req.Host
	if cred := c.cfg.Credentials; cred != nil {
		if err := cred(rreq.Request); err != nil {
			return nil, fmt.Errorf("%w: idem: credentials: %w", ErrInvalidOperation, err)
		}
	}
	resp, err := t.safe.Do(rreq)
	if resp != nil {
		resp.Request = req
	}
	return resp, err
}

// safeRetry is the CheckRetry of safe requests: go-retryablehttp's default policy decides
// what is worth retrying, the request's Policy whether another attempt fits.
func safeRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	retry, rerr := retryablehttp.DefaultRetryPolicy(ctx, resp, err)
	cl := safeCall(ctx)
	if !retry || rerr != nil || cl == nil {
		return false, rerr
	}
	cl.attempts++
	if cl.attempts >= cl.s.policy.MaxAttempts {
		return false, nil
	}
	var asked *http.Response // Retry-After counts on a 429 or 503 only
	if resp != nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) {
		asked = resp
	}
	d, fromRA := cl.nextDelay(asked)
	if !cl.allow(ctx, d, fromRA) { // too long a Retry-After, past MaxElapsed or the deadline
		return false, nil
	}
	cl.delay = d
	return true, nil
}

// safeWait is the PrepareRetry of safe requests: the wait safeRetry decided, by Config.Sleep.
func safeWait(req *http.Request) error {
	cl := safeCall(req.Context())
	if cl == nil {
		return nil
	}
	d := cl.delay
	cl.delay = 0
	return cl.c.cfg.Sleep(req.Context(), d)
}

// safeAttempt bounds each attempt of a safe request by its Policy.AttemptTimeout, until the
// response body is closed (go-retryablehttp closes it before a retry; the caller, after the
// last attempt).
type safeAttempt struct{ base http.RoundTripper }

func (t safeAttempt) RoundTrip(req *http.Request) (*http.Response, error) {
	cl := safeCall(req.Context())
	if cl == nil {
		return t.base.RoundTrip(req)
	}
	ctx, cancel := context.WithTimeout(req.Context(), cl.s.policy.AttemptTimeout)
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	if err == nil {
		err = refuseSwitch(resp) // its body would outlive AttemptTimeout: never handed on
	}
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose ends an attempt's context when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
