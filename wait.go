package idem

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem/outcome"
)

// nextDelay is the wait before the next attempt or status check: the next jittered backoff
// delay, capped at Policy.MaxDelay after jitter (cenkalti/backoff's jitter can exceed
// MaxInterval), or the server's Retry-After (RFC 9110 §10.2.3) when resp carries a longer one.
func (cl *call) nextDelay(resp *http.Response) (d time.Duration, fromRetryAfter bool) {
	var ra time.Duration
	var ok bool
	if resp != nil {
		ra, ok = outcome.ParseRetryAfter(resp.Header.Get("Retry-After"), cl.c.cfg.Now())
	}
	return cl.floorDelay(ra, ok)
}

// floorDelay treats a Retry-After as the earliest time to come back, not the only one: a
// server answering "Retry-After: 0" while it is overloaded or still processing still gets the
// backoff, so a fleet does not hammer it in a tight loop.
func (cl *call) floorDelay(ra time.Duration, ok bool) (time.Duration, bool) {
	b := cl.backoff()
	if ok && ra >= b {
		return ra, true
	}
	return b, false
}

func (cl *call) backoff() time.Duration {
	d := cl.expBackoff().NextBackOff()
	if d < 0 || d > cl.s.policy.MaxDelay { // backoff.Stop is -1; never happens with MaxElapsedTime 0
		d = cl.s.policy.MaxDelay
	}
	return d
}

// allow checks that a wait of d fits: within MaxRetryAfter when the server asked for it,
// inside MaxElapsed, and ending before the context deadline. It stops the call otherwise,
// at once, instead of sleeping into a wall.
func (cl *call) allow(ctx context.Context, d time.Duration, fromRetryAfter bool) bool {
	now := cl.c.cfg.Now()
	p := cl.s.policy
	tooLong := func(why string) bool {
		cl.halt(ErrRetryAfterTooLong, fmt.Errorf("server asked to wait %s, %s", d, why))
		cl.stop.RetryAfter = d
		return false
	}
	if fromRetryAfter && d > p.MaxRetryAfter {
		return tooLong(fmt.Sprintf("longer than the %s cap", p.MaxRetryAfter))
	}
	dl, hasDeadline := ctx.Deadline()
	pastDeadline := func() bool {
		cl.halt(ErrDeadline, fmt.Errorf("next attempt in %s, context deadline in %s: %w", d, dl.Sub(now).Round(time.Millisecond), context.DeadlineExceeded))
		if fromRetryAfter {
			cl.stop.RetryAfter = d
		}
		return false
	}
	// The nearer wall names the stop: a context deadline before the end of MaxElapsed is
	// ErrDeadline (context.DeadlineExceeded), whatever MaxElapsed would have said.
	end := cl.start.Add(p.MaxElapsed)
	if hasDeadline && dl.Before(end) && !now.Add(d).Before(dl) {
		return pastDeadline()
	}
	if left := end.Sub(now); d > left {
		if fromRetryAfter {
			return tooLong(fmt.Sprintf("longer than the %s left of MaxElapsed", left.Round(time.Millisecond)))
		}
		cl.halt(ErrExhausted, fmt.Errorf("next attempt in %s would pass MaxElapsed %s", d, p.MaxElapsed))
		return false
	}
	if hasDeadline && !now.Add(d).Before(dl) {
		return pastDeadline()
	}
	if fromRetryAfter && d > 0 {
		cl.c.stats.throttled.Add(1)
	}
	return true
}

// wait sleeps d after allow approved it; false means the call stopped.
func (cl *call) wait(ctx context.Context, d time.Duration, fromRetryAfter bool) bool {
	if !cl.allow(ctx, d, fromRetryAfter) {
		return false
	}
	sctx, cancel := cl.interruptible(ctx, 0)
	err := cl.c.cfg.Sleep(sctx, d)
	cl.endInterruptible(cancel)
	if err != nil {
		if lerr := cl.leaseLost(); lerr != nil {
			cl.stopLeaseLost(lerr)
			return false
		}
		cl.halt(ErrCanceled, err)
		return false
	}
	return true
}
