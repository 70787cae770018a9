package idem

import (
	"context"
	"net/http"

	"github.com/idemkit/idem/outcome"
)

// askLookup asks Config.Lookup about a call that ended on a refusal of a resend
// (call.lookupAfter: a 4xx, not the key's stored answer, after an unknown outcome or a
// status "not found"): ErrOutcomeUnknown, or ErrPermanent for a 400 after "not found". A
// business check ahead of the key's (a duplicate reference) may have found the earlier
// request's charge, which a lagging status endpoint did not show. A lookup that finds the
// payment makes the call a success (outcome.SourceLookup), its Note kept on the record. Anything
// else leaves the call as it ended: "no payment found" describes only the moment of the
// search, and the earlier request may still land after it, so it never turns an unknown
// outcome into a failure. A manual record, whose key the server has ended, is another
// matter (businessLookup).
func (cl *call) askLookup(ctx context.Context) {
	c := cl.c
	if c.dialect.lookupActs { // a cancel here would cancel the payment the resend may yet be answered with
		return
	}
	c.stats.lookups.Add(1)
	r, err := c.cfg.Lookup(ctx, LookupRequest{Record: cl.rec.Clone(), Get: c.getter(cl.rec, cl.header), Post: c.poster(cl.rec, cl.header)})
	if err == nil && r.Verdict != VerdictExecuted {
		return // none found yet, or could not tell: the call ends as the refusal says
	}
	if err == nil {
		err = r.check() // never a success with a non-2xx answer
	}
	if err != nil {
		c.warn("business lookup inconclusive after a refused resend; the call ends as the refusal says", cl.rec, err)
		return
	}
	if r.Note == "" {
		r.Note = "lookup: " + r.Verdict.String()
	}
	cl.rec.Note = r.Note
	res := &Result{Key: cl.rec.Key, StatusCode: http.StatusOK, Source: outcome.SourceLookup}
	if r.Response != nil {
		res.StatusCode, res.Header, res.Body = r.Response.StatusCode, r.Response.Header.Clone(), append([]byte(nil), r.Response.Body...)
	}
	cl.result = res
}
