package idem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/go-retryablehttp"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

// errStopped tells go-retryablehttp that the call decided to stop; the decision itself is in
// call.result or call.stop.
var errStopped = errors.New("idem: call stopped")

// call is the state of one Do (or one record in Recover): a per-call copy of everything
// that changes between attempts, so concurrent calls never share it.
type call struct {
	c      *Client
	s      callSettings
	rec    *keystore.Record
	header http.Header                 // headers as sent, credentials included (unlike rec.Request.Header)
	target string                      // absolute URL
	bo     *backoff.ExponentialBackOff // nil until the first retry (backoff)
	start  time.Time

	baseAttempts int // rec.Attempts when the call began
	attempts     int // requests sent in this call
	statusChecks int
	known        knowledge // what is known of the key's earlier requests (decide.go)
	lookupAfter  bool      // a refused resend after an unknown outcome or a "not found" ended the call: Config.Lookup may find the payment (refusal.go)
	last         *outcome.Attempt
	unknownCause string                // why the outcome became unknown ("; attempt 1 got ..."), for messages
	unsentBefore bool                  // no request of the key left before this call (resendExpired)
	delay        time.Duration         // wait before the next attempt, decided in checkRetry
	spent        int                   // retry-budget tokens this call took
	lastCode     int                   // status of the last response in this call, 0 if none
	lastAnswer   *outcome.Attempt      // the last attempt that got a response: every stop after it carries it
	credErr      error                 // Config.Credentials failed: nothing was sent, nothing will be
	lease        callLease             // the record's lease while the call runs (fleet.go)
	trace        httptrace.ClientTrace // GetConn sets pooled, GotConn written; set at the first attempt, composed with no caller's trace (RoundTrip)
	written      atomic.Bool           // the current attempt reached a connection (GotConn)
	pooled       atomic.Bool           // the current attempt asked net/http's pool for one (GetConn)
	bound        callCtx               // the caller's context carrying the call (bind)

	result *Result
	stop   *OperationError

	// What a successful call makes, allocated with it: one allocation instead of four.
	own struct {
		rec      keystore.Record   // the record Do creates (open)
		attempt  outcome.Attempt   // the first attempt
		resp     keystore.Response // the persisted response
		respUsed bool
		body     bytes.Reader // the body's reader until the first attempt (nextBody)
	}
	bodyReads int // nextBody calls so far
	// resumedResend: the first send of this resumed record took a token or the budget's
	// floor (takeResendToken); a success puts back one more resend's worth.
	resumedResend bool
	// resendWaited: resolve waited before allowing a resend (the status endpoint said
	// processing at every check), so the retry adds no delay of its own.
	resendWaited bool
	// lastSend and lastUnanswered: when the last request of the key left, and the last one
	// whose answer never came (it may still execute); a search's "not found" counts only
	// after them (searchReady).
	lastSend, lastUnanswered time.Time
	sendBody                 []byte // the body with the key in it (Profile.KeyField)
	finalWritten             bool   // finish's write of the final state succeeded
}

func (c *Client) newCall(s callSettings, rec *keystore.Record, header http.Header, target string) *call {
	return c.initCall(new(call), s, rec, header, target)
}

// initCall sets up cl, which may already hold rec (cl.own.rec).
func (c *Client) initCall(cl *call, s callSettings, rec *keystore.Record, header http.Header, target string) *call {
	c.stats.calls.Add(1)
	cl.c, cl.s, cl.rec, cl.header, cl.target = c, s, rec, header, target
	cl.start, cl.baseAttempts = c.cfg.Now(), rec.Attempts
	return cl
}

// expBackoff returns the call's backoff, made at the first retry: most calls never retry.
func (cl *call) expBackoff() *backoff.ExponentialBackOff {
	if cl.bo == nil {
		p := cl.s.policy
		cl.bo = backoff.NewExponentialBackOff(
			backoff.WithInitialInterval(p.InitialDelay),
			backoff.WithMultiplier(p.Multiplier),
			backoff.WithRandomizationFactor(p.Jitter),
			backoff.WithMaxInterval(p.MaxDelay),
			backoff.WithMaxElapsedTime(0), // MaxElapsed is enforced by the call, with the injected clock
		)
	}
	return cl.bo
}

// run drives the call to a known state. resumed means the record existed before this call,
// so an earlier attempt may have executed: the status endpoint is asked before any send.
// The record must be claimed by this client (created claimed, or Claim / ClaimExpired).
func (cl *call) run(ctx context.Context, resumed bool) (*Result, error) {
	cl.bind(ctx)
	cl.startLease(ctx)
	cl.unsentBefore = !resumed // a record this call created; a resumed one: below
	defer func() {
		// Every return has ended the lease (finish); only a panic gets here with it held (a
		// hook, a KeyStatusFunc, a outcome.Classifier of the application's). Left registered, the
		// renewer would hold the record for the life of the process and no instance could
		// finish it. Released, the record stays pending: the next Do or Recover asks first.
		if cl.lease.registered {
			cl.endLease()
			cl.release(cl.detached())
		}
	}()
	switch {
	case resumed && cl.rec.NotExecuted && cl.rec.Attempts > 0 && cl.keyExpired():
		// "Not executed" may rest on a status check's "not found" while a request was still
		// on its way; past KeyTTL the server may have run it and forgotten the key since, so
		// a resend could execute it again. Never resend a key older than KeyTTL that was ever
		// sent (a record no attempt ever left, Credentials failing, goes out as new).
		cl.expire()
		return cl.finish(ctx)
	case resumed && cl.rec.NotExecuted:
		if cl.rec.Attempts > 0 && !cl.takeResendToken(false) {
			return cl.finish(ctx) // still pending and not executed, nothing written or sent
		}
		cl.unsentBefore = cl.rec.Attempts == 0
		// The last call ended knowing nothing was executed: send without asking, but first
		// record durably that a send may now happen, so a crash mid-flight is asked about.
		cl.rec.NotExecuted = false
		touch(cl.rec, cl.c.cfg.Now())
		if err := cl.c.store.Update(ctx, cl.rec); err != nil { // nothing sent: the caller may retry
			if errors.Is(err, keystore.ErrFenced) {
				cl.loseLease(err)
				cl.stopLeaseLost(err)
				return cl.finish(ctx)
			}
			cl.endLease()
			cl.release(cl.detached())
			return nil, fmt.Errorf("idem: recording the resend before it starts: %w", err)
		}
	case resumed:
		cl.lastSend = cl.resumedLastSend()
		cl.lastUnanswered = cl.lastSend
		cl.known = knownUnknown // an earlier call or process may have sent it
		cl.unknownCause = "; an earlier call or process may have sent the key"
		cl.c.stats.unknown.Add(1)
		if !cl.resolve(ctx) {
			return cl.finish(ctx)
		}
		if !cl.takeResendToken(true) {
			return cl.finish(ctx)
		}
		if cl.c.dialect.searchFirst && !cl.persistBeforeSend() { // see prepareRetry
			return cl.finish(ctx)
		}
	}
	// The client's one retryablehttp.Client finds this call through the request context.
	ctx = &cl.bound
	req, err := retryablehttp.NewRequestWithContext(ctx, cl.rec.Request.Method, cl.target, retryablehttp.ReaderFunc(cl.nextBody))
	if err != nil {
		cl.halt(ErrInvalidOperation, err)
		return cl.finish(ctx)
	}
	for k, vs := range cl.header {
		if !strings.EqualFold(k, cl.c.cfg.KeyHeader) { // one key on the wire: the record's
			req.Header[k] = vs[:len(vs):len(vs)] // shared read-only: an Add reallocates, a Set replaces
		}
	}
	if cl.c.dialect.keyField == "" { // else the key travels in the body (nextBody)
		req.Header.Set(cl.c.cfg.KeyHeader, cl.keyValue())
	}
	resp, err := cl.c.retrier.Do(req)
	if resp != nil {
		resp.Body.Close()
	}
	if cl.result == nil && cl.stop == nil {
		if cerr := ctx.Err(); cerr != nil {
			// retryablehttp's own wait before a resend saw the context end: the resend was
			// decided (and recorded) but not made.
			cl.halt(ErrCanceled, cerr)
		} else { // stopped outside our decisions (should not happen)
			cl.halt(ErrOutcomeUnknown, err)
		}
	}
	return cl.finish(ctx)
}

func (cl *call) keyValue() string {
	if cl.c.cfg.KeyAsSFString {
		return sfString(cl.rec.Key)
	}
	return cl.rec.Key
}

// checkRetry is go-retryablehttp's CheckRetry: classify the attempt the transport recorded,
// resolve unknown outcomes through the status endpoint, and decide whether to resend.
func (cl *call) checkRetry(ctx context.Context, _ *http.Response, err error) (bool, error) {
	a := cl.last
	if a == nil { // the transport never ran: http.Client rejected the request
		cl.halt(ErrInvalidOperation, err)
		return false, errStopped
	}
	cl.last = nil
	if err := cl.leaseLost(); err != nil { // another instance owns the key now: never send again
		if a.Written {
			cl.known = knownUnknown
		}
		cl.stopLeaseLost(err)
		return false, errStopped
	}
	if cl.credErr != nil {
		cl.halt(ErrInvalidOperation, cl.credErr)
		return false, errStopped
	}
	if ctx.Err() != nil {
		if a.Written {
			cl.known = knownUnknown
		}
		cl.halt(ErrCanceled, ctx.Err())
		return false, errStopped
	}
	if a.Response != nil {
		cl.lastCode = a.Response.StatusCode
		cl.lastAnswer = a
	}
	class := cl.c.classes.Classify(a)
	if class < outcome.ClassSuccess || class > outcome.ClassDone || (class == outcome.ClassSuccess || class == outcome.ClassDone) && a.Response == nil ||
		class == outcome.ClassStoredServerError && a.StatusCode() < 300 || class == outcome.ClassStoredServerError && a.StatusCode()/100 == 4 {
		class = outcome.ClassUnknown // a classifier's impossible answer: ask before resending
	}
	if (class == outcome.ClassPermanent || class == outcome.ClassKeyConflict) && a.StatusCode() >= 500 {
		class = outcome.ClassStoredServerError // "do not retry" on a 5xx: the effect is still unknown
	}
	cl.c.onAttempt(cl, a, class)
	refused := (class == outcome.ClassPermanent || class == outcome.ClassKeyConflict) && (!a.Replayed() || outcome.NotFinal(a.StatusCode()))
	// After a "not found", a 400 is the exception to the rule below: malformed content (RFC
	// 9110 §15.5.1) is judged on the bytes, which the earlier request shares, so it was or
	// will be refused alike, and the status endpoint's "not found" says nothing was executed
	// (the contract). A server whose business checks run ahead of the key's, or whose status
	// endpoint lags, may still answer 400 for a charged payment: the business lookup, when
	// there is one, is asked before the call fails (refusal.go).
	badRequestAfterNotFound := refused && cl.known == knownNotFound && a.StatusCode() == http.StatusBadRequest
	cl.lookupAfter = (refused && cl.known != knownClean) && cl.c.cfg.Lookup != nil
	if refused && cl.known != knownClean && !badRequestAfterNotFound {
		// A resend after an attempt whose outcome is unknown, or after a "not found" that a
		// request still on its way (or a lagging status endpoint) may contradict, met a
		// refusal that is not the key's stored answer: an auth layer's 401, a WAF's 403, a
		// 422 "reference already used" from a check that ran before the key's, a key reuse
		// judged on a header that changed, or (a classifier of the caller's) no answer at
		// all. It says nothing of the earlier attempt, which may have executed: never a
		// failure (nor is a 408/409/425/429, even marked as a replay: see outcome.ClassifyReplay).
		// The record stays pending for a later Do or Recover; the business lookup, when
		// there is one, may find the payment at once (refusal.go).
		what := fmt.Sprintf("HTTP %d", a.StatusCode())
		if a.Response == nil {
			what = fmt.Sprintf("a transport error (%v)", a.Err)
		}
		cl.halt(ErrOutcomeUnknown, fmt.Errorf("%s to a resend after an attempt whose outcome is unknown: not the key's stored answer, so it does not say whether that attempt executed", what))
		return false, errStopped
	}
	switch class {
	case outcome.ClassSuccess:
		cl.succeed(a)
		return false, nil
	case outcome.ClassPermanent:
		cl.fail(ErrPermanent, a.StatusCode(), cl.response(a, outcome.SourceResponse), nil)
		return false, errStopped
	case outcome.ClassStoredServerError:
		src := outcome.SourceResponse
		if a.Replayed() {
			src = outcome.SourceReplay
		}
		cl.storedServerError(cl.response(a, src),
			fmt.Errorf("the server stored HTTP %d for the key: execution began (or a redirect said nothing of it), effect unknown", a.StatusCode()))
		return false, errStopped
	case outcome.ClassKeyConflict:
		cl.c.onKeyConflict(cl, a.StatusCode())
		cl.fail(ErrKeyConflict, a.StatusCode(), cl.response(a, outcome.SourceResponse),
			fmt.Errorf("the server refused key %q as already used with another request (HTTP %d); every request of the key from this keystore had the same method, URL and body (fingerprint %.12s), so what differed is elsewhere: a header the server compares (such as Content-Type, an API version or the account), or a request of the key from another client",
				cl.rec.Key, a.StatusCode(), cl.rec.Fingerprint))
		return false, errStopped
	case outcome.ClassDone:
		cl.fetchPointer(ctx, a) // sets the result, or stops the call
		return false, errStopped
	case outcome.ClassInProgress:
		cl.known = knownUnknown
		cl.unknownCause = cl.outcome(a, fmt.Sprintf("attempt %d", cl.attempts))
		wait, fromRA := cl.nextDelay(a.Response)
		cl.c.onInProgress(cl, wait)
		if !cl.wait(ctx, wait, fromRA) {
			return false, errStopped
		}
		if (cl.s.status != nil || cl.c.dialect.searchFirst) && !cl.resolve(ctx) {
			return false, errStopped
		}
		cl.resendWaited = false
		return cl.retry(ctx, a, class, true)
	case outcome.ClassUnknown:
		cl.known = knownUnknown
		cl.unknownCause = cl.outcome(a, fmt.Sprintf("attempt %d", cl.attempts))
		cl.c.onUnknown(cl, a)
		if (cl.s.status != nil || cl.c.dialect.searchFirst) && !cl.resolve(ctx) {
			return false, errStopped
		}
		if cl.s.status == nil && cl.resendExpired() {
			cl.expire()
			return false, errStopped
		}
		waited := cl.resendWaited // resolve waited already: processing at every check
		cl.resendWaited = false
		return cl.retry(ctx, a, class, waited)
	}
	return cl.retry(ctx, a, outcome.ClassRetry, false)
}
