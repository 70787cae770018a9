package idem

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

// Business reconciliation. A key answers for one request; when it can tell no more (the
// server stored a 5xx for it, or it is older than KeyTTL with an unknown outcome) the record
// is manual, and only the application's knowledge of its business intent can settle it: a
// search by the caller's reference (order id), or a person. The verdict is persisted here.

// Verdict is what a business lookup or an operator knows about a manual record's intent.
type Verdict int

const (
	// VerdictUnknown: the lookup could not tell (no answer, an answer it cannot read). The
	// record stays manual.
	VerdictUnknown Verdict = iota
	// VerdictExecuted: the intent took effect (a charge with the reference exists). The
	// record becomes succeeded with Resolution.Response as its answer, which must be a 2xx
	// (nil means an empty 200).
	VerdictExecuted
	// VerdictNotExecuted: the intent did not take effect. The record becomes failed with
	// Reason keystore.ReasonNotExecuted; Do returns ErrNotExecuted, and only then may the application
	// start a new intent (a new intent name, hence a new key) for the same business payment.
	VerdictNotExecuted
)

var verdictNames = [...]string{"unknown", "executed", "not_executed"}

// String returns "unknown", "executed" or "not_executed".
func (v Verdict) String() string {
	if v >= 0 && int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return fmt.Sprintf("verdict(%d)", int(v))
}

// Resolution settles a manual record.
type Resolution struct {
	// Verdict is what the person or the Lookup found: VerdictExecuted (the record becomes
	// succeeded) or VerdictNotExecuted (failed; Do then returns ErrNotExecuted). VerdictUnknown
	// is ErrInvalidOperation from Resolve.
	Verdict Verdict
	// Response is the answer found for VerdictExecuted (the charge the search returned); it
	// becomes the record's answer and what Do returns for the intent from then on. It must be
	// a 2xx (anything else is ErrInvalidOperation from Resolve, and an inconclusive lookup);
	// nil means an empty 200 answer. Ignored for VerdictNotExecuted (the stored answer is
	// kept).
	Response *keystore.Response
	// Note is kept on the record (keystore.Record.Note): who decided and on what evidence.
	Note string
	// CancelRefused says that the evidence is the provider's refusal of a cancel by
	// reference sent for the record (Adyen's TECHNICAL_CANCEL or CANCELLATION event with
	// success "false": a captured payment is not canceled), so the payment stands. Only with
	// it may VerdictExecuted settle a record a cancel was sent for (ErrCancelInFlight
	// otherwise: the cancel may have voided the charge).
	CancelRefused bool
}

// LookupRequest is what a LookupFunc is asked about.
type LookupRequest struct {
	// Record is a copy of the record asked about (manual, or pending after a refused resend:
	// see Config.Lookup): its Request (method, URL, body without credentials) says which
	// business intent to look for.
	Record *keystore.Record
	// Get sends GET path (relative to Config.BaseURL, or absolute) with the operation's
	// headers, Config.Credentials and "Accept: application/json", never following redirects,
	// bounded by Policy.AttemptTimeout, and returns the status and the body, read up to
	// 4 MiB plus six times the client's Policy.MaxResponseSize.
	Get func(ctx context.Context, path string) (status int, body []byte, err error)
	// Post is Get's POST with a JSON body (Content-Type application/json), for a settling
	// route that acts, such as a cancel by reference. It sends no idempotency key.
	Post func(ctx context.Context, path string, body []byte) (status int, respBody []byte, err error)
}

// LookupFunc asks the API about a record's business intent (see Config.Lookup). It
// must answer VerdictNotExecuted only when the API's answer proves that nothing took effect
// (a search that is consistent with the payments it lists); when in doubt, VerdictUnknown.
// An error counts as VerdictUnknown. It may be called from several goroutines at once (Do
// calls, Recover's workers), so it must be safe for that.
type LookupFunc func(ctx context.Context, req LookupRequest) (Resolution, error)

// Resolve settles the manual record (scope, key) with the application's or an operator's
// own verdict, persists it, and returns the record as persisted. VerdictExecuted makes the
// record succeeded (r.Response becomes its answer, Reason keystore.ReasonExecuted); VerdictNotExecuted
// makes it failed (Reason keystore.ReasonNotExecuted, Do then returns ErrNotExecuted). r.Note is kept
// on the record. Resolve waits for any call of this client holding the key.
//
// Errors: ErrInvalidConfig for a nil or zero *Client; ErrInvalidOperation for a nil ctx,
// VerdictUnknown, a response status outside 100..599, or VerdictExecuted with a response
// that is not a 2xx (the record would become succeeded with an error answer);
// keystore.ErrNotFound when there is no such record; an *OperationError matching
// ErrNotManual when the record is not manual (pending, succeeded or failed: nothing is
// written); an *OperationError matching ErrCancelInFlight while a cancel by reference sent
// for the record by any instance may still land (nothing is written: give the verdict again
// after the time the error names); ErrCanceled when ctx ends while waiting; a *ClockSkewError (ErrClockSkew) when
// the store has a clock and Config.Now is off it by more than Config.Fleet.MaxClockSkew (the
// verdict's time would be wrong for every other instance; nothing is written); a keystore
// error when the write fails.
func (c *Client) Resolve(ctx context.Context, scope, key string, r Resolution) (*keystore.Record, error) {
	if err := checkEntry(c, ctx); err != nil {
		return nil, err
	}
	if err := r.check(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOperation, err)
	}
	unlock, _, err := c.locks.lock(ctx, keyLockName(scope, key))
	if err != nil {
		return nil, &OperationError{Key: key, Scope: scope, Kind: ErrCanceled, Cause: err}
	}
	defer unlock.Unlock()
	rec, err := c.get(ctx, scope, key)
	if err != nil {
		if errors.Is(err, keystore.ErrNotFound) {
			return nil, fmt.Errorf("idem: resolving key %q in tenant %q: %w (a record of another tenant needs its scope)", key, scope, err)
		}
		return nil, fmt.Errorf("idem: resolving key %q: %w", key, err)
	}
	if rec.State != keystore.StateManual {
		return nil, &OperationError{Key: rec.Key, Scope: rec.Scope, Intent: rec.Intent, Kind: ErrNotManual,
			LastStatusCode: rec.LastStatusCode, Stored: true, Cause: fmt.Errorf("record is %s", rec.State)}
	}
	if err := c.settle(ctx, rec, r, false); err != nil {
		if errors.Is(err, errSettledElsewhere) {
			return nil, &OperationError{Key: rec.Key, Scope: rec.Scope, Intent: rec.Intent, Kind: ErrNotManual,
				LastStatusCode: rec.LastStatusCode, Stored: true, Cause: fmt.Errorf("record is %s (settled by another instance meanwhile)", rec.State)}
		}
		if errors.Is(err, ErrCancelInFlight) {
			return nil, &OperationError{Key: rec.Key, Scope: rec.Scope, Intent: rec.Intent, Kind: ErrCancelInFlight,
				LastStatusCode: rec.LastStatusCode, Stored: true, Cause: err}
		}
		return nil, err
	}
	c.onResolved(rec, r.Verdict == VerdictExecuted, false)
	return rec.Clone(), nil
}

// check refuses a resolution that cannot be persisted as it stands: no conclusive verdict, a
// status outside 100..599, or an executed verdict whose answer is not a 2xx (a succeeded
// record with a 500 would make Do return that 500 as a success).
func (r Resolution) check() error {
	if r.Verdict != VerdictExecuted && r.Verdict != VerdictNotExecuted {
		return fmt.Errorf("a resolution needs VerdictExecuted or VerdictNotExecuted, got %s", r.Verdict)
	}
	if r.Response == nil {
		return nil
	}
	if r.Response.StatusCode < 100 || r.Response.StatusCode > 599 {
		return fmt.Errorf("resolution response status %d", r.Response.StatusCode)
	}
	if r.Verdict == VerdictExecuted && r.Response.StatusCode/100 != 2 {
		return fmt.Errorf("an executed verdict needs a 2xx answer, got status %d", r.Response.StatusCode)
	}
	return nil
}

// errSettledElsewhere: the record stopped being manual while its verdict was being formed
// (another instance's lookup or a person settled it); rec now holds the stored record.
var errSettledElsewhere = errors.New("idem: the record was settled meanwhile")

// settle applies a verdict to a manual record and persists it, unless the record is no
// longer manual in the store: then rec becomes the stored record and the error is
// errSettledElsewhere, and nothing is written. Manual records hold no lease, so two
// instances may look one up at once; the re-read keeps a late verdict from overwriting an
// earlier one. That matters after a not-executed verdict: the application then pays under a
// new intent, and a search by reference run after that payment would find it and call the
// old key executed. A verdict formed before the re-read saw only what preceded the first
// verdict's write, so the window that remains (re-read to write) cannot hold that payment.
// Two writes in that window at once (two verdicts past their re-reads, from two processes)
// are ordered by the store when it is a keystore.StateGuardedUpdater (Memory, bbolt,
// pgstore): the write is made only while the record is still manual, and the later verdict
// gets errSettledElsewhere. With a store that is not, the later write stands.
//
// A cancel by reference claimed on the record (cancelclaim.go) holds every other verdict
// until it can no longer land (ErrCancelInFlight); ownCancel is the claimant's own verdict,
// written with the claim's Fence after its cancel was answered.
func (c *Client) settle(ctx context.Context, rec *keystore.Record, r Resolution, ownCancel bool) error {
	// The verdict's UpdatedAt is this clock's: far behind, the record would look older than
	// Retention to every other instance and be purged, and its intent paid again.
	if err := c.checkWriteClock(ctx, rec); errors.Is(err, ErrClockSkew) {
		return err
	}
	cur, err := c.store.Get(context.WithoutCancel(ctx), rec.Scope, rec.Key)
	if err != nil {
		return fmt.Errorf("idem: re-reading key %q before persisting its resolution: %w", rec.Key, err)
	}
	if cur.State != keystore.StateManual {
		*rec = *cur
		return errSettledElsewhere
	}
	if !ownCancel {
		if err := c.cancelMayLand(cur, r); err != nil {
			return err
		}
	}
	next := rec.Clone()
	next.Note, next.NotExecuted = r.Note, false
	touch(next, c.cfg.Now())
	if r.Verdict == VerdictExecuted {
		next.State, next.Reason = keystore.StateSucceeded, keystore.ReasonExecuted
		next.Response = &keystore.Response{StatusCode: http.StatusOK}
		if r.Response != nil {
			// Never persisted: credentials, Set-Cookie, Config.SecretHeaders (as a call's answer).
			h, body := c.redactStored(keystore.StripSecrets(r.Response.Header, append([]string{"Set-Cookie"}, c.cfg.SecretHeaders...)...), r.Response.Body)
			next.Response = &keystore.Response{StatusCode: r.Response.StatusCode, Header: h,
				Body: append([]byte(nil), body...)}
		}
	} else {
		next.State, next.Reason = keystore.StateFailed, keystore.ReasonNotExecuted
	}
	// Two verdicts given at once must not both be reported as persisted: a store that can
	// make the write conditional on the record still being manual does so atomically.
	if g, ok := c.store.(keystore.StateGuardedUpdater); ok {
		err = g.UpdateFromState(context.WithoutCancel(ctx), next, keystore.StateManual)
	} else {
		err = c.store.Update(context.WithoutCancel(ctx), next)
	}
	if errors.Is(err, keystore.ErrStateChanged) {
		if cur, gerr := c.store.Get(context.WithoutCancel(ctx), rec.Scope, rec.Key); gerr == nil {
			*rec = *cur
			return errSettledElsewhere
		}
	}
	if errors.Is(err, keystore.ErrFenced) { // claimed since it was read: a cancel is on its way
		if cur, gerr := c.store.Get(context.WithoutCancel(ctx), rec.Scope, rec.Key); gerr == nil {
			if cur.State != keystore.StateManual {
				*rec = *cur
				return errSettledElsewhere
			}
			if cerr := c.cancelMayLand(cur, r); cerr != nil {
				return cerr
			}
		}
	}
	if err != nil {
		return fmt.Errorf("idem: persisting the resolution of key %q: %w", rec.Key, err)
	}
	*rec = *next
	return nil
}

// businessLookup asks Config.Lookup about a manual record waiting for reconciliation and persists a
// conclusive answer. ok is false when there is no lookup, it could not tell, or the verdict
// could not be persisted: the record stays manual and the caller keeps its own error.
func (c *Client) businessLookup(ctx context.Context, rec *keystore.Record, header http.Header, stop error) (*Result, error, bool) {
	if c.cfg.Lookup == nil || rec.State != keystore.StateManual ||
		(rec.Reason != keystore.ReasonStoredServerError && rec.Reason != reasonKeyExpired) {
		return nil, nil, false
	}
	seen := rec.Clone() // the record as found: its last send and any earlier cancel's claim
	if c.dialect.lookupActs {
		// A cancel is made only once no request of the key, and no earlier cancel, can still
		// land, and only by the instance that claimed the record for it.
		if err := c.tooSoonForNotExecuted(seen); err != nil {
			c.warn("business lookup not asked yet; the record stays manual", rec, err)
			return nil, nil, false
		}
		claimed, err := c.claimForCancel(ctx, rec)
		if err != nil {
			c.warn("cancel by reference not sent; the record stays manual", rec, err)
			return nil, nil, false
		}
		rec.Owner, rec.LeaseUntil, rec.Fence = claimed.Owner, claimed.LeaseUntil, claimed.Fence
	}
	c.stats.lookups.Add(1)
	r, err := c.cfg.Lookup(ctx, LookupRequest{Record: seen.Clone(), Get: c.getter(rec, header), Post: c.poster(rec, header)})
	if err == nil && r.Verdict != VerdictExecuted && r.Verdict != VerdictNotExecuted {
		err = errors.New("the lookup could not tell")
	}
	if err == nil {
		err = r.check() // never a succeeded record with a non-2xx answer
	}
	if err == nil && r.Verdict == VerdictNotExecuted {
		err = c.tooSoonForNotExecuted(seen)
	}
	if err != nil {
		c.warn("business lookup inconclusive; the record stays manual", rec, err)
		return nil, nil, false
	}
	if r.Note == "" {
		r.Note = "lookup: " + r.Verdict.String()
	}
	if c.dialect.cancelAsync && r.Verdict == VerdictNotExecuted {
		// The provider accepted the cancel but reports its outcome later: the record waits
		// for that event, and no second cancel is sent.
		if err := c.cancelRequested(ctx, rec, r.Note); err != nil {
			c.warn("recording the cancel request", rec, err)
		}
		return nil, nil, false
	}
	if err := c.settle(ctx, rec, r, c.dialect.lookupActs); err != nil {
		if errors.Is(err, errSettledElsewhere) && rec.State != keystore.StatePending {
			res, err := c.storedOutcome(rec) // the verdict that was persisted first stands
			return res, err, true
		}
		c.warn("recording the business lookup's verdict", rec, err)
		return nil, nil, false
	}
	c.onResolved(rec, r.Verdict == VerdictExecuted, true)
	return c.resolvedOutcome(rec, stop)
}

// resolvedOutcome is what Do returns right after a record was settled.
func (c *Client) resolvedOutcome(rec *keystore.Record, stop error) (*Result, error, bool) {
	if rec.State == keystore.StateSucceeded {
		return &Result{Key: rec.Key, StatusCode: rec.Response.StatusCode, Header: rec.Response.Header,
			Body: rec.Response.Body, Source: outcome.SourceLookup}, nil, true
	}
	e := &OperationError{Key: rec.Key, Scope: rec.Scope, Intent: rec.Intent, Kind: ErrNotExecuted,
		LastStatusCode: rec.LastStatusCode, Cause: fmt.Errorf("resolved as not executed: %s", rec.Note)}
	var prev *OperationError
	if errors.As(stop, &prev) {
		e.Attempts, e.Response, e.Stored = prev.Attempts, prev.Response, prev.Stored
	}
	return nil, e, true
}

// tooSoonForNotExecuted refuses a lookup's "not executed" for an expired key whose last
// request may still land. The server may have forgotten such a key, so nothing stops a
// request sent under it from executing after a search that found nothing; the verdict
// counts only once expiredKeySettleDelay has passed since the latest time a request of the
// key can have been sent: the record's UpdatedAt (it is written manual after the call that
// sent last, and never moves back: touch) or, after a crash mid-call, its LeaseUntil (no
// attempt outlives the lease it was sent under), and never before its CreatedAt. A clock
// stepped back puts that time in the future and the wait grows with it. A stored 5xx needs
// no wait of its own (the server ended the key's execution), only the profile's:
//
// A profile's search that lags (profile.Route.Lag: Stripe's search, about a minute) adds its
// lag for every reason, counted from the final write: a charge made just before may not show
// yet. A lookup that acts (a cancel by reference) waits its Route.Landing the same way, so
// that no request of the key still on its way charges after the cancel.
func (c *Client) tooSoonForNotExecuted(rec *keystore.Record) error {
	wait := max(c.dialect.lookupLag, c.dialect.actLanding)
	if rec.Reason == reasonKeyExpired {
		wait = max(wait, expiredKeySettleDelay)
	}
	if wait == 0 {
		return nil
	}
	last := later(rec.CreatedAt, rec.UpdatedAt)
	if cancelClaimed(rec) { // an earlier cancel's request may still land until its claim ends
		last = later(last, rec.LeaseUntil)
	}
	if rec.Reason == reasonKeyExpired {
		// Such a record may have been resumed from a call that crashed mid-send: its lease
		// bounds that send. A stored 5xx was written manual by the call that sent last,
		// after its last send (the lease it may still hold says nothing more).
		last = later(last, rec.LeaseUntil)
	}
	if ready := last.Add(wait); c.cfg.Now().Before(ready) {
		return fmt.Errorf("no payment found, but a request sent under the key may still land, or the search not show it yet, until %s: asked again after that (Do, Recover)",
			ready.UTC().Format(time.RFC3339))
	}
	return nil
}
