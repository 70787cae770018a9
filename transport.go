package idem

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
)

// attemptTransport wraps the caller's transport; the client has one, and each request
// carries its call in its context (withCall). Each RoundTrip is one attempt:
// it applies the attempt timeout, learns through httptrace whether the request reached a
// connection, reads the whole body inside the timeout, and records the Attempt for
// checkRetry. It also makes the request non-replayable, so that net/http never resends it
// behind our back.
type attemptTransport struct {
	base http.RoundTripper
}

func (t *attemptTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	cl := callFrom(req.Context())
	if cl == nil {
		return nil, &notSentError{errNoCall}
	}
	if err := cl.guardSend(req.Context()); err != nil { // never send without the lease
		cl.last = &Attempt{Number: cl.attempts + 1, Err: &notSentError{err}}
		return nil, cl.last.Err
	}
	ctx, cancel := context.WithTimeout(req.Context(), cl.s.policy.AttemptTimeout)
	defer cancel()
	var written atomic.Bool
	// GotConn is the last moment before request bytes may leave. Counting from there is
	// conservative: at worst an unsent request costs one status check.
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { written.Store(true) }}
	// A shallow copy: the header map already belongs to this call's request alone.
	out := req.WithContext(httptrace.WithClientTrace(ctx, trace))
	// net/http replays a request on a reused connection when it deems it replayable, and a
	// request with an Idempotency-Key and a GetBody is. A nil GetBody and a non-nil body turn
	// that off; idem owns every resend.
	out.GetBody = nil
	if out.Body == nil || out.Body == http.NoBody {
		out.Body = io.NopCloser(bytes.NewReader(nil))
	}
	if cl.c.cfg.Credentials != nil {
		if err := cl.c.cfg.Credentials(out); err != nil {
			cl.credErr = fmt.Errorf("idem: credentials: %w", err)
			cl.last = &Attempt{Number: cl.attempts + 1, Err: &notSentError{cl.credErr}}
			return nil, cl.last.Err
		}
	}
	cl.attempts++
	cl.c.stats.attempts.Add(1)
	a := &Attempt{Number: cl.attempts}
	resp, err := t.base.RoundTrip(out)
	if err == nil {
		var body []byte
		body, err = io.ReadAll(io.LimitReader(resp.Body, cl.s.policy.MaxResponseSize+1))
		resp.Body.Close()
		if err == nil && int64(len(body)) > cl.s.policy.MaxResponseSize {
			err = fmt.Errorf("idem: response body larger than %d bytes", cl.s.policy.MaxResponseSize)
		}
		if err == nil {
			resp.Body = http.NoBody // read into a.Body: nothing reads it twice
			a.Response, a.Body = resp, body
		} else {
			resp = nil // a half-read answer is no answer: the outcome is unknown
		}
	}
	a.Err = err
	a.Written = written.Load() || a.Response != nil
	if err != nil && !a.Written {
		a.Err = &notSentError{err}
	}
	cl.last = a
	return resp, a.Err
}
