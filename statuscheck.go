package idem

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem/outcome"
)

// resolve asks the status endpoint what happened to the key, waiting between asks as the
// server says (202 + Retry-After) or by backoff, at most Policy.MaxKeyStatusChecks times. It
// returns true when a (re)send with the same key is due and safe; otherwise the call has
// ended (result or stop is set). Without a status endpoint it allows the resend while the
// key is younger than KeyTTL.
//
// Where the provider caches nothing on error (profile.ReplayNothingOnError), a resend that
// the status endpoint allows goes through the search by reference first: a status by key
// knows nothing of a key whose request charged and then failed (searchBeforeResend).
func (cl *call) resolve(ctx context.Context) bool {
	if !cl.resolveStatus(ctx) {
		return false
	}
	if cl.c.dialect.searchFirst {
		return cl.searchBeforeResend(ctx)
	}
	return true
}

// resolveStatus is resolve without the search.
func (cl *call) resolveStatus(ctx context.Context) bool {
	if cl.s.status == nil {
		if cl.resendExpired() {
			cl.expire()
			return false
		}
		return true
	}
	ctx, cancel := cl.interruptible(ctx, 0)
	defer cl.endInterruptible(cancel)
	// The status function gets its own copy of the headers: what it adds must not reach the
	// operation's later attempts.
	header := cl.header.Clone()
	if header == nil {
		header = http.Header{}
	}
	req := outcome.KeyStatusRequest{Key: cl.rec.Key, Scope: cl.rec.Scope, Method: cl.rec.Request.Method,
		URL: cl.rec.Request.URL, Header: header}
	var wait time.Duration
	var fromRA bool
	processing := 0 // answers that said the server is executing the key
	var last string // what the last check got, for the message when none was final
	for i := 0; i < cl.s.policy.MaxKeyStatusChecks; i++ {
		if i > 0 && !cl.wait(ctx, wait, fromRA) {
			return false
		}
		sctx, cancel := context.WithTimeout(context.WithValue(ctx, responseSizeKey{}, cl.s.policy.MaxResponseSize), cl.s.policy.AttemptTimeout)
		st, err := cl.s.status(sctx, req)
		cancel()
		cl.statusChecks++
		last = lastCheck(st, err)
		if err != nil || st.State == outcome.KeyStatusCompleted && (st.ResponseStatusCode < 200 || st.ResponseStatusCode > 599 || outcome.NotFinal(st.ResponseStatusCode)) {
			st = outcome.KeyStatus{State: outcome.KeyStatusUnknown} // garbage, a 1xx, or a "come back later": proves nothing
		}
		cl.c.onStatusCheck(cl, st, err)
		if ctx.Err() != nil {
			cl.halt(ErrCanceled, ctx.Err())
			return false
		}
		switch st.State {
		case outcome.KeyStatusCompleted:
			if st.ResponseStatusCode/100 == 2 || st.ResponseStatusCode/100 == 4 { // a stored 5xx or 3xx resolves nothing
				cl.c.stats.unknownResolved.Add(1)
			}
			res := &Result{Key: cl.rec.Key, StatusCode: st.ResponseStatusCode, Body: st.ResponseBody, Source: outcome.SourceKeyStatus}
			switch {
			case st.ResponseStatusCode >= 200 && st.ResponseStatusCode < 300:
				cl.known = knownClean
				cl.result = res
			case st.ResponseStatusCode >= 500: // execution began; a stored 5xx never says how far
				cl.storedServerError(res, fmt.Errorf("status endpoint reports the key completed with HTTP %d: execution began, effect unknown", st.ResponseStatusCode))
			case st.ResponseStatusCode < 400: // a stored redirect: processed (303) or who knows
				cl.storedServerError(res, fmt.Errorf("status endpoint reports the key completed with HTTP %d, a redirect: effect unknown", st.ResponseStatusCode))
			default: // the server stored a failure for this key; a resend would get it again
				cl.fail(ErrPermanent, st.ResponseStatusCode, res, fmt.Errorf("status endpoint reports the key ended with HTTP %d", st.ResponseStatusCode))
			}
			return false
		case outcome.KeyStatusNotFound:
			if cl.resendExpired() { // the server may have forgotten the key: not found proves nothing
				cl.expire()
				return false
			}
			cl.c.stats.unknownResolved.Add(1)
			// Not found says the server has not seen the key yet, not that a request sent
			// before (by this call, or by an earlier one moments ago) will never arrive: it
			// may be queued in a load balancer. knownNotFound keeps a refusal of the resend from
			// passing for the payment's answer. A resumed record counts too (lastSend is
			// set by run): a crash during its first attempt leaves no count of that request
			// on disk.
			cl.known = knownClean
			if !cl.lastSend.IsZero() {
				cl.known = knownNotFound
			}
			return true
		}
		if st.State == outcome.KeyStatusProcessing {
			processing++
		}
		// Processing, or no usable answer: back off, or wait longer if the server asks.
		wait, fromRA = cl.floorDelay(st.RetryAfter, st.HasRetryAfter)
	}
	if processing == cl.s.policy.MaxKeyStatusChecks && !cl.resendExpired() {
		// The server knows the key and said at every check that it is executing it. It may be
		// a request its owner abandoned (a checkpointed handler whose process died), which
		// only a request with the key resumes: the server takes it over once the owner's
		// lease ends. While an owner still runs it, the server answers that resend 409 (in
		// progress: wait); by the contract, never a second execution. The outcome stays
		// unknown until an answer settles it. The last check's wait (its Retry-After, or the
		// backoff) comes first, as before any other ask.
		if !cl.wait(ctx, wait, fromRA) {
			return false
		}
		if cl.resendExpired() { // the wait may have carried the key past KeyTTL
			cl.expire()
			return false
		}
		cl.resendWaited = true // the outcome stays unknown: the resend's refusal is not the key's answer
		return true
	}
	if cl.resendExpired() {
		// Past KeyTTL the server may have forgotten the key, and nothing will ever be resent:
		// a business lookup or a person must settle it (manual), as Recover's doc says.
		cl.expire()
		return false
	}
	cl.halt(ErrOutcomeUnknown, fmt.Errorf("status endpoint gave no final answer in %d checks (the last %s)%s", cl.s.policy.MaxKeyStatusChecks, last, cl.unknownCause))
	return false
}

// lastCheck says what a status check got, so that an operator tells "the API is down" (the
// transport's error) from "the API says it is still executing".
func lastCheck(st outcome.KeyStatus, err error) string {
	switch {
	case err != nil:
		return "failed: " + err.Error()
	case st.State == outcome.KeyStatusProcessing:
		return "said the key is still executing"
	case st.State == outcome.KeyStatusCompleted:
		return fmt.Sprintf("reported HTTP %d, which settles nothing", st.ResponseStatusCode)
	default:
		return "gave no usable answer"
	}
}

// maxStatusBody bounds a status answer (or a lookup's) read into memory, in bytes, beyond
// six times the call's Policy.MaxResponseSize: the answer carries the stored response whole,
// possibly as a JSON string where a byte such as "<" takes six ("\u003c"), and one the API
// itself would have been allowed to send must never be cut into "unknown".
const maxStatusBody = 4 << 20

// responseSizeKey is the context key of the asking call's Policy.MaxResponseSize (int64).
type responseSizeKey struct{}

// statusBodyLimit is the bound on one status or lookup answer, in bytes: from the asking
// call's policy when ctx carries it, else the client's.
func (c *Client) statusBodyLimit(ctx context.Context) int64 {
	size, ok := ctx.Value(responseSizeKey{}).(int64)
	if !ok {
		size = c.policy.MaxResponseSize
	}
	return maxStatusBody + 6*size
}

// defaultStatus asks GET BaseURL+path (with "{key}" replaced by the escaped key) in the
// default JSON convention, with the key header, the operation's headers and credentials.
func (c *Client) defaultStatus(path string) outcome.KeyStatusFunc {
	return func(ctx context.Context, r outcome.KeyStatusRequest) (outcome.KeyStatus, error) {
		filled, err := fillPlaceholder(path, "{key}", r.Key)
		if err != nil {
			return outcome.KeyStatus{}, err
		}
		target, err := c.resolveURL(filled)
		if err != nil {
			return outcome.KeyStatus{}, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return outcome.KeyStatus{}, err
		}
		for k, vs := range r.Header {
			if !strings.EqualFold(k, "Content-Type") && !strings.EqualFold(k, "Content-Length") &&
				!strings.EqualFold(k, c.cfg.KeyHeader) {
				req.Header[k] = vs[:len(vs):len(vs)] // shared read-only: an Add by Credentials reallocates
			}
		}
		key := r.Key
		if c.cfg.KeyAsSFString {
			key = sfString(key)
		}
		req.Header.Set(c.cfg.KeyHeader, key)
		req.Header.Set("Accept", "application/json")
		if c.cfg.Credentials != nil {
			if err := c.cfg.Credentials(req); err != nil {
				return outcome.KeyStatus{}, fmt.Errorf("idem: credentials: %w", err)
			}
		}
		resp, err := c.statusHTTP.Do(req)
		if err != nil {
			return outcome.KeyStatus{}, err
		}
		if err := refuseSwitch(resp); err != nil {
			return outcome.KeyStatus{}, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, c.statusBodyLimit(ctx)))
		if err != nil {
			return outcome.KeyStatus{}, err
		}
		return outcome.DecodeKeyStatus(resp.StatusCode, resp.Header, body, c.cfg.Now()), nil
	}
}
