package idem

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"reflect"
	"sync"

	"github.com/idemkit/idem/outcome"
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
		return nil, outcome.NotSent(errNoCall)
	}
	if err := cl.guardSend(req.Context()); err != nil { // never send without the lease
		cl.last = &outcome.Attempt{Number: cl.attempts + 1, Err: outcome.NotSent(err)}
		return nil, cl.last.Err
	}
	ctx, cancel := cl.interruptible(req.Context(), cl.s.policy.AttemptTimeout)
	defer cl.endInterruptible(cancel)
	// An error proves the request unsent only when net/http's connection pool was asked
	// (GetConn) and handed no connection (no GotConn), GotConn being the last moment before
	// request bytes may leave, and only through a Transport that reports GotConn on every
	// connection (provesUnsent). A request that never reached the pool went elsewhere (an
	// HTTP/3 client, a RoundTripper given to Transport.RegisterProtocol) and may have been
	// written unseen: its error is an outcome unknown. Both hooks fire only inside this
	// RoundTrip, so one trace serves every attempt of the call, set at the first and never
	// written again (a dial that outlives its attempt may still read it). WithClientTrace
	// composes a caller's trace into the one it is given: with a caller's trace, each attempt
	// gets its own, or the caller's hooks would run twice at the second.
	if cl.trace.GotConn == nil {
		cl.trace.GetConn = func(string) { cl.pooled.Store(true) }
		cl.trace.GotConn = func(httptrace.GotConnInfo) { cl.written.Store(true) }
	}
	trace := &cl.trace
	if httptrace.ContextClientTrace(ctx) != nil {
		trace = &httptrace.ClientTrace{GetConn: cl.trace.GetConn, GotConn: cl.trace.GotConn}
	}
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
			cl.last = &outcome.Attempt{Number: cl.attempts + 1, Err: outcome.NotSent(cl.credErr)}
			return nil, cl.last.Err
		}
	}
	cl.attempts++
	cl.c.stats.attempts.Add(1)
	sentAt := cl.c.cfg.Now()
	cl.lastSend = sentAt
	a := &cl.own.attempt
	if cl.attempts > 1 { // hooks may keep an Attempt: each has its own
		a = new(outcome.Attempt)
	}
	*a = outcome.Attempt{Number: cl.attempts}
	// Reset here, after Credentials: a request it made with out's context fired the hooks too.
	cl.written.Store(false)
	cl.pooled.Store(false)
	if err := ctx.Err(); err != nil { // timed out before it reached the transport (a starved host): unsent
		a.Err = outcome.NotSent(err)
		cl.last = a
		return nil, a.Err
	}
	resp, err := t.base.RoundTrip(out)
	if err == nil {
		err = refuseSwitch(resp) // then resp is nil below: an answer we cannot read is no answer
	}
	if err == nil {
		var body []byte
		body, err = readBody(resp.Body, resp.ContentLength, cl.s.policy.MaxResponseSize)
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
	} else {
		resp = nil
	}
	a.Err = err
	a.Written = cl.written.Load() || a.Response != nil ||
		(err != nil && !(cl.pooled.Load() && provesUnsent(t.base)))
	if err != nil && !a.Written {
		a.Err = outcome.NotSent(err)
	}
	if a.Written && (a.Response == nil || a.Response.StatusCode == http.StatusBadGateway || a.Response.StatusCode == http.StatusGatewayTimeout) {
		cl.lastUnanswered = sentAt // the server may still be executing it
	}
	cl.last = a
	return resp, a.Err
}

// refuseSwitch closes the body of a 101 Switching Protocols answer and returns an error.
// Such a body is the raw connection: neither the request's context nor http.Client.Timeout
// ends a read of it, so a server that switched protocols and then said nothing would hold
// the call (and its lease) for as long as it kept the connection open. idem never asks for
// an upgrade, so a 101 is a broken answer: the request may have reached the server.
//
// A nil response (with a nil error: a RoundTripper breaking its contract, which http.Client
// turns into an error but a direct caller does not) is an error too, not a panic.
func refuseSwitch(resp *http.Response) error {
	if resp == nil {
		return errors.New("idem: the HTTP transport returned neither a response nor an error")
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return nil
	}
	resp.Body.Close()
	return errors.New("idem: the server answered 101 Switching Protocols to a request that asked for no upgrade")
}

// readBody reads r to its end, or to one byte more than limit. size is the announced
// length (-1 if unknown): when it fits, the buffer is allocated once at that size.
func readBody(r io.Reader, size, limit int64) ([]byte, error) {
	n := int64(512)
	if size >= 0 && size <= limit {
		n = size + 1 // room to see the EOF without growing
	}
	b := make([]byte, 0, n)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		room := cap(b) - len(b)
		if over := limit + 1 - int64(len(b)); int64(room) > over {
			room = int(over)
		}
		m, err := r.Read(b[len(b) : len(b)+room])
		b = b[:len(b)+m]
		if err == io.EOF {
			return b, nil
		}
		if err != nil || int64(len(b)) > limit {
			return b, err
		}
	}
}

// provesUnsent reports whether GetConn without GotConn proves that rt wrote nothing: rt is
// net/http's Transport and every protocol handler it may hand a connection to
// (TLSNextProto) is net/http's own HTTP/2, which reports GotConn itself. For any other
// handler net/http skips GotConn, and a wrapping RoundTripper may hide such a Transport.
// Called only after an error without GotConn: the happy path never pays for it.
func provesUnsent(rt http.RoundTripper) bool {
	t, ok := rt.(*http.Transport)
	if !ok {
		return false
	}
	for _, next := range t.TLSNextProto {
		if !netHTTPNextProto()[reflect.ValueOf(next).Pointer()] {
			return false
		}
	}
	return true
}

// netHTTPNextProto returns the code addresses of the TLSNextProto handlers net/http installs
// for HTTP/2, read once from a Transport that set its defaults (on the first error that
// needs them, not at package load).
var netHTTPNextProto = sync.OnceValue(func() map[uintptr]bool {
	t := &http.Transport{ForceAttemptHTTP2: true}
	t.CloseIdleConnections() // sets TLSNextProto's defaults
	m := make(map[uintptr]bool, len(t.TLSNextProto))
	for _, next := range t.TLSNextProto {
		m[reflect.ValueOf(next).Pointer()] = true
	}
	return m
})
