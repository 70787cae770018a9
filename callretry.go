package idem

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem/outcome"
)

// Resends: what the last attempt said, the retry budget's token, the wait, and the body
// sent again.

// lastOutcome says what the last attempt got, for an error message: its status, or its
// transport error as text (not wrapped: an attempt's own timeout must not read as the
// caller's context.DeadlineExceeded).
func (cl *call) lastOutcome(a *outcome.Attempt) string { return cl.outcome(a, "the last") }

// outcome is lastOutcome with the attempt named as which.
func (cl *call) outcome(a *outcome.Attempt, which string) string {
	switch {
	case a == nil:
		return ""
	case a.Response != nil:
		return fmt.Sprintf("; %s got HTTP %d", which, a.Response.StatusCode)
	case errors.Is(a.Err, context.DeadlineExceeded) && cl.bound.Err() == nil:
		return fmt.Sprintf("; %s got no answer within the attempt timeout (%s)", which, cl.s.policy.AttemptTimeout)
	case a.Err != nil:
		return fmt.Sprintf("; %s failed: %v", which, a.Err)
	}
	return ""
}

// takeResendToken takes a retry-budget token for the first send of a resumed record that was
// sent before (by an earlier call or process): that send is a resend of the intent, like a
// retry. Without it, a fleet's reclaimer and a restart's Recover resent every pending record
// into an outage the budget was holding back. unknown: the earlier outcome is unknown (the
// costlier token, as for a retry after a timeout). A denied token stops the call with
// ErrBudgetExhausted; the record stays pending for a later Do or Recover. The budget's floor
// (resendFloor) lets one such resend through per second even with an empty bucket.
func (cl *call) takeResendToken(unknown bool) bool {
	if cl.s.noBudget {
		return true
	}
	if cl.c.budget.takeResend(cl, unknown, cl.c.cfg.Now()) {
		cl.resumedResend = true
		return true
	}
	cl.c.onBudgetDenied(cl)
	cl.halt(ErrBudgetExhausted, errors.New("the retry budget holds back resends of records sent before"))
	return false
}

// retry decides whether a resend may happen: attempts left, a wait that fits the policy,
// the deadline and the time budget, and a retry-budget token. waited means the caller already
// waited for this resend (409 in progress), so no further delay is added.
func (cl *call) retry(ctx context.Context, a *outcome.Attempt, reason outcome.Class, waited bool) (bool, error) {
	if cl.attempts >= cl.s.policy.MaxAttempts {
		cl.halt(ErrExhausted, fmt.Errorf("%d of %d attempts used%s", cl.attempts, cl.s.policy.MaxAttempts, cl.lastOutcome(a)))
		return false, errStopped
	}
	var d time.Duration
	var fromRA bool
	if !waited {
		var resp *http.Response
		if a != nil && reason == outcome.ClassRetry {
			resp = a.Response // Retry-After on a 429/503 is the server's word on when to come back
		}
		d, fromRA = cl.nextDelay(resp)
	}
	if !cl.allow(ctx, d, fromRA) {
		return false, errStopped
	}
	if !cl.s.noBudget && !cl.c.budget.take(cl, reason == outcome.ClassUnknown || reason == outcome.ClassInProgress) {
		cl.c.onBudgetDenied(cl)
		cl.halt(ErrBudgetExhausted, nil)
		return false, errStopped
	}
	cl.delay = d
	cl.c.onRetry(cl, d, reason, fromRA)
	if !cl.persistProgress(ctx) {
		return false, errStopped
	}
	return true, nil
}

// prepareRetry is go-retryablehttp's PrepareRetry: it waits the delay checkRetry decided,
// with the injected clock, and stops at once when the context ends.
func (cl *call) prepareRetry(req *http.Request) error {
	d := cl.delay
	cl.delay = 0
	sctx, cancel := cl.interruptible(req.Context(), 0)
	err := cl.c.cfg.Sleep(sctx, d)
	cl.endInterruptible(cancel)
	if err != nil {
		if lerr := cl.leaseLost(); lerr != nil {
			cl.stopLeaseLost(lerr)
			return errStopped
		}
		cl.halt(ErrCanceled, err)
		return errStopped
	}
	// The wait may have carried the key past KeyTTL: a server that forgot it would run the
	// resend as new, while an earlier request of it may have executed. Never resend a key
	// older than KeyTTL that was ever sent, whatever made this resend due (a 503, a 409,
	// a status check before the wait).
	if cl.baseAttempts+cl.attempts > 0 && cl.resendExpired() {
		cl.expire()
		return errStopped
	}
	// Another instance may have taken the record during the wait: a fenced renewal proves
	// this call still holds it before the resend, and extends the lease over the attempt.
	if err := cl.renew(context.WithoutCancel(req.Context())); err != nil {
		cl.stopLeaseLost(err)
		return errStopped
	}
	// Where nothing is cached on error, the record's UpdatedAt bounds the key's last send
	// for whoever resumes it after a crash (resumedLastSend): it is written again right
	// before the resend, whatever the wait was.
	if cl.c.dialect.searchFirst && !cl.persistBeforeSend() {
		return errStopped
	}
	return nil
}
