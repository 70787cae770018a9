package idem

import (
	"fmt"
	"time"

	"github.com/idemkit/idem/outcome"
)

// How a call ends: with an answer, a failure, a stop that leaves the record pending, a
// stored 5xx, or a key the server may have forgotten.

func (cl *call) succeed(a *outcome.Attempt) {
	src := outcome.SourceResponse
	if a.Response.Header.Get("Idempotent-Replayed") == "true" {
		src = outcome.SourceReplay
		cl.c.onReplay(cl, a.StatusCode())
	}
	cl.known = knownClean
	cl.result = cl.response(a, src)
}

func (cl *call) response(a *outcome.Attempt, src outcome.Source) *Result {
	if a == nil || a.Response == nil {
		return nil
	}
	return &Result{Key: cl.rec.Key, StatusCode: a.Response.StatusCode, Header: a.Response.Header,
		Body: a.Body, Source: src}
}

// fail ends the call with a final, non-retryable answer.
func (cl *call) fail(kind error, status int, resp *Result, cause error) {
	cl.known = knownClean
	cl.stop = &OperationError{Kind: kind, LastStatusCode: status, Response: resp, Cause: cause}
}

// halt ends the call without a final answer; the record stays pending (or becomes manual).
func (cl *call) halt(kind error, cause error) {
	cl.stop = &OperationError{Kind: kind, Cause: cause}
}

// storedServerError ends the call on a 5xx the server stored for the key: outcome unknown
// for good, the record goes manual with the stored answer.
func (cl *call) storedServerError(resp *Result, cause error) {
	cause = fmt.Errorf("%w; the key can tell no more: the record is manual until Config.Lookup or Client.Resolve (a person's verdict) settles it; never pay it again under a new key", cause)
	cl.known = knownUnknown
	cl.stop = &OperationError{Kind: ErrStoredServerError, Unknown: true, LastStatusCode: resp.StatusCode,
		Response: resp, Cause: cause}
	cl.c.onStoredServerError(cl, resp)
}

// keyExpired reports a key the server may have forgotten: older than KeyTTL, or created
// later than this clock's now by more than twice MaxClockSkew (a clock stepped back since, or one
// far ahead when it wrote the record): its age is then unknown and may be past KeyTTL, and
// a resend could execute it a second time.
func (cl *call) keyExpired() bool {
	age := cl.c.cfg.Now().Sub(cl.rec.CreatedAt)
	return age > cl.c.cfg.KeyTTL || age < -cl.c.clockBackTolerance()
}

// resendExpired is keyExpired for a resend after a wait: the server first saw the key at
// the earliest request of it, so a key no request of which left before this call (a
// withdrawn or Credentials-refused record sent late, known never sent) is judged from this
// call's start, and any other from its CreatedAt. A key first sent past KeyTTL went manual
// at its first 503 otherwise, a payment never executed waiting for a person (adversarial
// run).
func (cl *call) resendExpired() bool {
	if cl.unsentBefore {
		age := cl.c.cfg.Now().Sub(cl.start)
		return age > cl.c.cfg.KeyTTL || age < -cl.c.clockBackTolerance()
	}
	return cl.keyExpired()
}

// clockBackTolerance is how far in the future a record's CreatedAt may be before its age
// counts as unknown: twice MaxClockSkew, since two instances each within it of the store
// may be that far apart (twice DefaultMaxClockSkew when the check is off).
func (c *Client) clockBackTolerance() time.Duration {
	if c.cfg.Fleet.MaxClockSkew > 0 {
		return 2 * c.cfg.Fleet.MaxClockSkew
	}
	return 2 * DefaultMaxClockSkew
}

func (cl *call) expire() {
	age := cl.c.cfg.Now().Sub(cl.rec.CreatedAt)
	cl.c.onKeyExpired(cl, age)
	cl.known = knownUnknown
	if age < 0 {
		cl.halt(ErrKeyExpired, fmt.Errorf("key was created at %s, %s after this clock's now: a clock moved back, so its age is unknown and may be past the server's %s",
			cl.rec.CreatedAt.Format(time.RFC3339), (-age).Round(time.Second), cl.c.cfg.KeyTTL))
		return
	}
	cl.halt(ErrKeyExpired, fmt.Errorf("key is %s old, the server keeps keys %s", age.Round(time.Second), cl.c.cfg.KeyTTL))
}
