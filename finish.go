package idem

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

// persistProgress records the attempts made so far before a retry waits, so that a crash
// during the wait leaves an honest record. A store error here is logged, not fatal: the
// record is still pending, which is all recovery needs.
// A fenced refusal means another instance owns the record now: the call stops (false).
func (cl *call) persistProgress(ctx context.Context) bool {
	ok, _ := cl.writeProgress()
	return ok
}

// persistBeforeSend is persistProgress right before a resend where the search decides
// (searchFirst): the write is what dates the key's last send for whoever resumes the record
// (resumedLastSend), so a failed write stops the call (ErrOutcomeUnknown, the record
// pending) instead of sending unrecorded.
func (cl *call) persistBeforeSend() bool {
	ok, err := cl.writeProgress()
	if ok && err != nil {
		cl.halt(ErrOutcomeUnknown, fmt.Errorf("the write that dates this resend failed, so it was not sent: %w%s", err, cl.unknownCause))
		return false
	}
	return ok
}

// writeProgress writes the attempts made so far; ok is false when the call stopped (a fenced
// write: another instance owns the record), err a write that failed otherwise (logged).
func (cl *call) writeProgress() (ok bool, err error) {
	cl.rec.Attempts = cl.baseAttempts + cl.attempts
	touch(cl.rec, cl.c.cfg.Now())
	if err := cl.c.store.Update(cl.detached(), cl.rec); err != nil {
		if errors.Is(err, keystore.ErrFenced) {
			cl.loseLease(err)
			cl.stopLeaseLost(err)
			return false, err
		}
		cl.c.warn("recording attempt", cl.rec, err)
		return true, err
	}
	return true, nil
}

// finish persists the call's final state and returns what Do returns. A cancelled caller
// still gets its record written (cl.detached: without the caller's cancellation).
func (cl *call) finish(ctx context.Context) (*Result, error) {
	cl.endLease()
	if err := cl.leaseLost(); err != nil {
		if cl.result == nil {
			return cl.finishLost(err)
		}
		// The server answered before the loss was seen: the answer is true, and the new
		// owner learns the same from the server. Only the write is left to it.
		cl.result.Attempts, cl.result.KeyStatusChecks = cl.attempts, cl.statusChecks
		cl.c.stats.succeeded.Add(1)
		return cl.result, nil
	}
	if cl.lookupAfter && cl.result == nil && cl.stop != nil && (cl.stop.Kind == ErrOutcomeUnknown || cl.stop.Kind == ErrPermanent) {
		cl.askLookup(ctx)
	}
	rec := cl.rec
	var gaveUp *OperationError
	rec.Attempts = cl.baseAttempts + cl.attempts
	// Where the search decides a resend (searchFirst), UpdatedAt bounds the key's last send
	// (resumedLastSend): a call that sent nothing leaves it, or every call that waited for
	// the landing and ran out of time would push the landing back.
	if !cl.c.dialect.searchFirst || cl.attempts > 0 {
		touch(rec, cl.c.cfg.Now())
	}
	rec.Reason, rec.Error, rec.NotExecuted = "", "", false
	switch {
	case cl.result != nil:
		rec.State = keystore.StateSucceeded
		if cl.result.Source == outcome.SourceLookup {
			rec.Reason = keystore.ReasonExecuted // the business lookup found it (askLookup)
		}
		rec.LastStatusCode = cl.result.StatusCode
		rec.Response = cl.persistedResponse(cl.result)
		cl.result.Attempts, cl.result.KeyStatusChecks = cl.attempts, cl.statusChecks
		cl.c.stats.succeeded.Add(1)
	default:
		e := cl.stop
		e.Key, e.Scope, e.Intent = rec.Key, rec.Scope, rec.Intent
		e.Attempts, e.Unknown = cl.attempts, e.Unknown || cl.known == knownUnknown
		if e.LastStatusCode == 0 {
			e.LastStatusCode = rec.LastStatusCode
			if cl.lastCode != 0 {
				e.LastStatusCode = cl.lastCode
			}
		}
		if e.Response == nil { // the caller sees what the server last said, whatever stopped us
			e.Response = cl.response(cl.lastAnswer, outcome.SourceResponse)
		}
		rec.LastStatusCode = e.LastStatusCode
		rec.Reason = kindReason(e.Kind)
		if e.Cause != nil {
			rec.Error = e.Cause.Error()
		}
		if e.Response != nil {
			rec.Response = cl.persistedResponse(e.Response)
		}
		switch e.Kind {
		case ErrPermanent, ErrKeyConflict:
			rec.State = keystore.StateFailed
			cl.c.stats.failed.Add(1)
			cl.c.budget.answered(cl)
		case ErrStoredServerError:
			rec.State = keystore.StateManual // never resent, never failed: reconcile
			cl.c.budget.answered(cl)
		case ErrKeyExpired:
			rec.State = keystore.StateManual
		default:
			rec.State = keystore.StatePending                      // reconcilable: Do again or Recover
			rec.NotExecuted = !e.Unknown && cl.known == knownClean // a request that may still land: ask first next time
			if e.Unknown {
				cl.c.stats.stillUnknown.Add(1)
			}
		}
		gaveUp = e // counted once the business lookup had its say
	}
	err := cl.c.updateFinal(cl.detached(), rec)
	cl.finalWritten = err == nil
	if err != nil {
		if errors.Is(err, keystore.ErrFenced) { // taken over meanwhile: the new owner writes
			cl.loseLease(err)
			if cl.result == nil {
				if gaveUp != nil {
					cl.c.onGiveUp(cl, gaveUp)
				}
				return cl.finishLost(err)
			}
		} else if rec.State == keystore.StateFailed && cl.result == nil {
			// The refusal is not recorded: the record may still be pending, and a later Do or
			// Recover would send it again, where the server may have stored nothing. Until
			// then the payment is not settled: never report a failure the store may not hold.
			cl.c.warn("recording final state", rec, err)
			return cl.failedUnrecorded(gaveUp, err)
		} else {
			// The answer is known but not recorded. The record stays pending, so a later Do
			// or Recover asks the server again and finds the same answer: safe, so report it.
			cl.c.warn("recording final state", rec, err)
		}
	} else if rec.State == keystore.StatePending && !cl.lease.keep {
		// Ordered after the final write (a deferred write is committed with or before the
		// release), and fenced like it: another instance may reclaim the record once the
		// hold ends (holdAfter), at once when there is none.
		cl.c.releaseOrHold(cl.detached(), rec, cl.lease.fence, cl.c.holdAfter(cl.stop, rec.Attempts))
	} else if cl.result != nil && cl.result.Source == outcome.SourceLookup {
		cl.c.onResolved(rec, true, true) // once the verdict is written, as businessLookup does
	}
	if cl.result != nil {
		cl.c.budget.succeeded(cl)
		return cl.result, nil
	}
	if rec.State == keystore.StateManual && (!cl.c.dialect.lookupActs || cl.finalWritten) {
		// The key can tell no more: the application's own lookup may (one that acts only
		// once the record is durably manual).
		if res, err, ok := cl.c.businessLookup(ctx, rec, cl.header, cl.stop); ok {
			if res != nil { // the payment was found: the call ends with a Result after all
				res.Attempts, res.KeyStatusChecks = cl.attempts, cl.statusChecks
				cl.c.stats.succeeded.Add(1)
				return res, nil
			}
			if e, ok := errors.AsType[*OperationError](err); ok {
				gaveUp = e // ErrNotExecuted, or the verdict another instance persisted
			}
			cl.c.onGiveUp(cl, gaveUp)
			return nil, err
		}
	}
	if gaveUp != nil {
		cl.c.onGiveUp(cl, gaveUp)
	}
	return nil, cl.stop
}

func (cl *call) persistedResponse(r *Result) *keystore.Response {
	if r == nil {
		return nil
	}
	h := r.Header
	if !cleanHeader(h, cl.c.cfg.SecretHeaders) { // else the store's own copy is enough
		h = keystore.StripSecrets(h, append([]string{"Set-Cookie"}, cl.c.cfg.SecretHeaders...)...)
	}
	for name, values := range h {
		// HTTP allows obs-text (non-UTF-8) header bytes; a keystore may refuse them, and a
		// refused write would leave a paid operation pending. The body is what matters.
		for _, v := range values {
			if !utf8.ValidString(v) || !utf8.ValidString(name) {
				delete(h, name)
				break
			}
		}
	}
	resp := &cl.own.resp
	if cl.own.respUsed {
		resp = new(keystore.Response)
	}
	cl.own.respUsed = true
	h, body := cl.c.redactStored(h, r.Body)
	*resp = keystore.Response{StatusCode: r.StatusCode, Header: h, Body: body}
	return resp
}

// finishLost ends a call whose record another instance took over: nothing is written (the
// new owner's record must not be overwritten) and the caller gets ErrLeaseLost, with
// Unknown set when a request of this call may have executed.
func (cl *call) finishLost(cause error) (*Result, error) {
	rec := cl.rec
	e := &OperationError{Key: rec.Key, Scope: rec.Scope, Intent: rec.Intent, Kind: ErrLeaseLost,
		Attempts: cl.attempts, LastStatusCode: cl.lastCode, Cause: cause,
		Unknown:  cl.known == knownUnknown || (cl.stop != nil && cl.stop.Unknown),
		Response: cl.response(cl.lastAnswer, outcome.SourceResponse)}
	cl.stop, cl.result = e, nil
	cl.c.onGiveUp(cl, e)
	return nil, e
}

// failedUnrecorded is what Do returns when the server refused the call (refused) but the
// store could not record the failure (err): ErrOutcomeUnknown, the refusal kept in Response
// and named in Cause. The record may still be pending and be sent again by a later Do or
// Recover, so the application must treat the payment as unsettled, not failed.
func (cl *call) failedUnrecorded(refused *OperationError, err error) (*Result, error) {
	e := &OperationError{Key: refused.Key, Scope: refused.Scope, Intent: refused.Intent, Kind: ErrOutcomeUnknown,
		Attempts: refused.Attempts, LastStatusCode: refused.LastStatusCode, Response: refused.Response,
		Cause: fmt.Errorf("the server refused the request (%v), but the keystore could not record the failure, "+
			"so the record may still be pending and be sent again: %w", refused.Kind, err)}
	cl.stop = e
	cl.c.stats.failed.Add(-1) // counted as failed above, before the write
	cl.c.onGiveUp(cl, e)
	return nil, e
}
