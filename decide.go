package idem

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
	"github.com/idemkit/idem/profile"
)

// The decision table: what a profile's reading of an answer (profile.Meaning) makes the
// call do next. checkRetry acts on the Class; the settling routes run where the table says.
//
//	meaning        class                   next step
//	in-progress    ClassInProgress         wait (Retry-After or backoff), then ask (status, or the search where nothing is cached on error), then resend the key
//	key-reuse      ClassKeyConflict        stop: ErrKeyConflict
//	done           ClassDone               fetch the pointer (FetchPointer route): the resource is the answer
//	unknown        ClassUnknown            ask (status route; the search first where nothing is cached on error), then resend the key within KeyTTL
//	retry          ClassRetry              wait, resend the key
//	stored-error   ClassStoredServerError  manual: the Lookup (search or cancel by reference) or a person settles it
var meaningClass = [...]outcome.Class{
	profile.Undecided:   outcome.ClassUndecided,
	profile.InProgress:  outcome.ClassInProgress,
	profile.KeyReuse:    outcome.ClassKeyConflict,
	profile.Done:        outcome.ClassDone,
	profile.Unknown:     outcome.ClassUnknown,
	profile.Retry:       outcome.ClassRetry,
	profile.StoredError: outcome.ClassStoredServerError,
}

// knowledge is what a call knows of the requests of its key sent before (by itself, an
// earlier call or another process): the state the contract's decisions turn on.
type knowledge uint8

const (
	// knownClean: no request of the key can have executed unseen (none sent yet, or an
	// answer settled it).
	knownClean knowledge = iota
	// knownUnknown: a request may have executed and nothing has settled it: the outcome is
	// unknown. Ask (status route, search) before any resend; a refusal of a resend is not
	// the key's answer.
	knownUnknown
	// knownNotFound: settled as not executed (a status "not found", a search that found
	// nothing), but a request sent before may still land: a refusal of the resend is not the
	// key's answer either, and a call stopping here is not recorded as not executed.
	knownNotFound
)

// classOf returns the call's Class for a profile's Meaning (ClassUnknown for one it does not
// know: when in doubt, ask before resending).
func classOf(m profile.Meaning) outcome.Class {
	if m >= 0 && int(m) < len(meaningClass) {
		return meaningClass[m]
	}
	return outcome.ClassUnknown
}

// fetchPointer settles a "done" answer: the profile's FetchPointer route, with the id the
// matching rule's Pointer names, is the key's answer (cl.result). When the id or the
// resource cannot be had it stops the call (ErrOutcomeUnknown, the record pending): the
// answer says the key's request succeeded, never that it failed.
func (cl *call) fetchPointer(ctx context.Context, a *outcome.Attempt) {
	p := cl.c.dialect.p
	var id string
	for _, r := range p.Rules {
		if r.Meaning == profile.Done && r.Matches(a.Response.StatusCode, a.Response.Header, a.Body) {
			id, _ = profile.Value(a.Body, r.Pointer)
			break
		}
	}
	cl.known = knownUnknown
	cl.unknownCause = cl.outcome(a, fmt.Sprintf("attempt %d", cl.attempts))
	route, ok := p.Route(profile.FetchPointer)
	if !ok || id == "" {
		cl.halt(ErrOutcomeUnknown, fmt.Errorf("HTTP %d says the key's request succeeded, but names no resource this profile can fetch", a.StatusCode()))
		return
	}
	path, err := fillPlaceholder(route.Path, "{id}", id)
	if err == nil {
		var status int
		var body []byte
		status, body, err = cl.c.getter(cl.rec, cl.header)(ctx, path)
		if err == nil && status/100 == 2 && !samePayment(cl.rec, body) {
			err = fmt.Errorf("the resource %s names another reference than this payment's", id)
		} else if err == nil && status/100 == 2 {
			cl.known = knownClean
			cl.rec.Note = fmt.Sprintf("the key's request had succeeded: %s (HTTP %d) named %s", p.Name, a.StatusCode(), id)
			cl.result = &Result{Key: cl.rec.Key, StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}},
				Body: body, Source: outcome.SourceLookup}
			return
		}
		if err == nil {
			err = fmt.Errorf("HTTP %d", status)
		}
	}
	cl.halt(ErrOutcomeUnknown, fmt.Errorf("the key's request succeeded as %s, and fetching it failed: %w", id, err))
}

// samePayment reports whether a fetched resource can be this record's payment: its
// reference, when it has one, is the request's.
func samePayment(rec *keystore.Record, body []byte) bool {
	ref, err := referenceOf(rec, ReferenceField)
	if err != nil {
		return true // the request names no reference to compare
	}
	got, ok := referenceIn(body, ReferenceField)
	return !ok || got == ref
}

// searchBeforeResend is the status check of a profile whose provider caches nothing on
// error (profile.ReplayNothingOnError): the same key would execute again, so a resend
// after an unknown outcome waits for the search by reference. A payment found is the
// call's answer (SourceLookup); "not found" allows the resend only once no earlier request
// can still land and the search has had its lag (searchReady); until then, or when the
// search cannot tell, it asks again after a wait, at most Policy.MaxKeyStatusChecks times,
// and then stops with ErrOutcomeUnknown (the record pending: the next Do or Recover asks
// again). It returns true when the resend may go.
func (cl *call) searchBeforeResend(ctx context.Context) bool {
	d := &cl.c.dialect
	landing := d.searchRoute.Landing
	if landing == 0 {
		landing = profile.DefaultLanding
	}
	var wait time.Duration
	why := "the search could not tell"
	for i := 0; i < cl.s.policy.MaxKeyStatusChecks; i++ {
		if i > 0 && !cl.wait(ctx, wait, false) {
			return false
		}
		cl.statusChecks++
		cl.c.stats.lookups.Add(1)
		r, err := d.search(ctx, LookupRequest{Record: cl.rec.Clone(), Get: cl.c.getter(cl.rec, cl.header)})
		if ctx.Err() != nil {
			cl.halt(ErrCanceled, ctx.Err())
			return false
		}
		if err == nil && r.Verdict == VerdictExecuted {
			err = r.check()
		}
		now := cl.c.cfg.Now()
		switch {
		case err != nil:
			why = "the search could not tell: " + err.Error()
			wait, _ = cl.nextDelay(nil)
		case r.Verdict == VerdictExecuted:
			cl.known = knownClean
			cl.c.stats.unknownResolved.Add(1)
			cl.rec.Note = r.Note
			res := &Result{Key: cl.rec.Key, StatusCode: http.StatusOK, Source: outcome.SourceLookup}
			if r.Response != nil {
				res.StatusCode, res.Header, res.Body = r.Response.StatusCode, r.Response.Header.Clone(), append([]byte(nil), r.Response.Body...)
			}
			cl.result = res
			return false
		default:
			ready := cl.searchReady(landing, d.searchRoute.Lag)
			if !now.Before(ready) {
				cl.known = knownNotFound
				cl.c.stats.unknownResolved.Add(1)
				return true
			}
			why = fmt.Sprintf("no payment found, but an earlier request may still land, or the search not show it yet, until %s", ready.UTC().Format(time.RFC3339))
			wait = max(ready.Sub(now), 0)
		}
	}
	cl.halt(ErrOutcomeUnknown, fmt.Errorf("no resend: %s repeats a key's payment after an error, and %s%s", d.p.Name, why, cl.unknownCause))
	return false
}

// searchReady is when a search's "not found" becomes evidence: Lag after the last request
// of the key, and Landing after the last one whose answer never came.
func (cl *call) searchReady(landing, lag time.Duration) time.Time {
	ready := cl.lastSend.Add(lag)
	if !cl.lastUnanswered.IsZero() {
		ready = later(ready, cl.lastUnanswered.Add(landing))
	}
	return ready
}

// resumedLastSend bounds when an earlier call or process last sent the key of a resumed
// record. Where the search decides (searchFirst), every send follows a write of the record
// at once (its creation; prepareRetry and run write it again right before a resend,
// whatever the wait), so its UpdatedAt is that bound, up to the moments between the write
// and the send, which Landing covers. It is never later than now: the record was claimed,
// so no earlier call still sends it.
func (cl *call) resumedLastSend() time.Time {
	last := later(cl.rec.CreatedAt, cl.rec.UpdatedAt)
	if last.After(cl.start) {
		return cl.start
	}
	return last
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
