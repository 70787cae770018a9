package idem

import (
	"context"
	"errors"
	"math"
	"net/http"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// One retryablehttp.Client and one http.Client serve every call of a Client. Everything that
// changes between attempts lives in the call, which each request carries in its context, so
// concurrent calls never share state.

// callKey is the context key of the call a request belongs to (callCtx).
type callKey struct{}

// callFrom returns the call ctx carries, or nil.
func callFrom(ctx context.Context) *call {
	cl, _ := ctx.Value(callKey{}).(*call)
	return cl
}

// errNoCall: a request reached the client's retrier without a call in its context.
var errNoCall = errors.New("idem: request without a call")

// newRetrier builds the client's retryablehttp.Client. retryablehttp's own limit is out of
// the way (RetryMax is huge): checkRetry enforces the call's MaxAttempts, which per-call
// options may change.
func (c *Client) newRetrier() *retryablehttp.Client {
	rt := c.http.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	hc := &http.Client{
		Transport: &attemptTransport{base: rt},
		Jar:       c.http.Jar,
		Timeout:   c.http.Timeout,
		// A redirect would resend the body to another URL; a 3xx is classified instead.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &retryablehttp.Client{
		HTTPClient: hc,
		RetryMax:   math.MaxInt32,
		CheckRetry: func(ctx context.Context, resp *http.Response, err error) (bool, error) {
			cl := callFrom(ctx)
			if cl == nil {
				return false, errNoCall
			}
			return cl.checkRetry(ctx, resp, err)
		},
		Backoff: func(time.Duration, time.Duration, int, *http.Response) time.Duration { return 0 },
		PrepareRetry: func(req *http.Request) error {
			cl := callFrom(req.Context())
			if cl == nil {
				return errNoCall
			}
			return cl.prepareRetry(req)
		},
		ErrorHandler: func(resp *http.Response, err error, _ int) (*http.Response, error) { return resp, err },
	}
}
