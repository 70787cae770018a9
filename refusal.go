package idem

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// confirmRefusal asks Config.Lookup about a call that ended on a 400 to a resend after the
// status endpoint said "not found" (call.confirm). Either the 400 judged the request's bytes,
// which the earlier request shares (malformed: it was or will be refused alike, nothing ran),
// or it came from a business check (a duplicate reference) that found the earlier request's
// effect. A lookup that finds the payment makes the call a success (SourceLookup); one that
// finds none makes the 400 the call's answer (ErrPermanent); an inconclusive one leaves the
// call ErrOutcomeUnknown, the record pending.
func (cl *call) confirmRefusal(ctx context.Context) {
	c := cl.c
	c.stats.lookups.Add(1)
	r, err := c.cfg.Lookup(ctx, LookupRequest{Record: cl.rec.Clone(), Get: c.getter(cl.rec, cl.header)})
	if err == nil && r.Verdict != VerdictExecuted && r.Verdict != VerdictNotExecuted {
		err = errors.New("the lookup could not tell")
	}
	if err == nil {
		err = r.check() // never a success with a non-2xx answer
	}
	if err != nil {
		c.warn("business lookup inconclusive after a 400 to a resend; the record stays pending", cl.rec, err)
		return
	}
	if r.Note == "" {
		r.Note = "lookup: " + r.Verdict.String()
	}
	cl.rec.Note = r.Note
	c.onResolved(cl.rec, r.Verdict == VerdictExecuted, true)
	if r.Verdict == VerdictExecuted {
		res := &Result{Key: cl.rec.Key, StatusCode: http.StatusOK, Source: SourceLookup}
		if r.Response != nil {
			res.StatusCode, res.Header, res.Body = r.Response.StatusCode, r.Response.Header.Clone(), append([]byte(nil), r.Response.Body...)
		}
		cl.result = res
		return
	}
	cl.stop = &OperationError{Kind: ErrPermanent, Cause: fmt.Errorf(
		"HTTP 400 to a resend after the status endpoint said \"not found\", and the business lookup found no payment (%s)", r.Note)}
}
