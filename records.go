package idem

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

// The keystore side of a call: find or persist the record, and answer from it when the
// operation already ended.

// get and getByIntent read the store, treating a (nil, nil) answer of a faulty Store as an
// error rather than a crash.
func (c *Client) get(ctx context.Context, scope, key string) (*keystore.Record, error) {
	rec, err := c.store.Get(ctx, scope, key)
	if err == nil && rec == nil {
		err = errNilRecord
	}
	return rec, err
}

func (c *Client) getByIntent(ctx context.Context, scope, intent string) (*keystore.Record, error) {
	rec, err := c.store.GetByIntent(ctx, scope, intent)
	if err == nil && rec == nil {
		err = errNilRecord
	}
	return rec, err
}

var errNilRecord = errors.New("idem: keystore returned neither a record nor an error")

// open finds the record for op (by intent, then by key) or persists a new pending one.
// Without an intent it tries the Create first and looks only when the key exists: most keys
// are new, and a read costs a transaction (or a round trip) of its own.
// A record it creates is written into buf.
func (c *Client) open(ctx context.Context, op *Operation, scope string, buf *keystore.Record) (*keystore.Record, bool, error) {
	fp := Fingerprint(op.method, c.target(op.url), op.body)
	for try := 0; try < 3; try++ {
		var rec *keystore.Record
		err := keystore.ErrNotFound
		if try > 0 || op.intent != "" {
			rec, err = c.lookup(ctx, op, scope)
		}
		if err == nil {
			// The fingerprint over the URL as written matches records from before
			// normalisation; computed only here, when a stored record differs.
			if rec.Fingerprint != fp && rec.Fingerprint != Fingerprint(op.method, op.url, op.body) {
				return nil, false, &OperationError{Key: rec.Key, Scope: scope, Intent: rec.Intent, Kind: ErrKeyConflict,
					Cause: fmt.Errorf("key %q is bound to another request (%s %s, fingerprint %.12s); this one is %s %s, fingerprint %.12s: %s; %s",
						rec.Key, rec.Request.Method, rec.Request.URL, rec.Fingerprint, op.method, op.url, fp, c.requestDiff(rec, op), conflictAdvice(rec))}
			}
			return rec, false, nil
		}
		if _, ok := errors.AsType[*OperationError](err); ok { // a conflict (AsType: no allocation)
			return nil, false, err
		}
		if !errors.Is(err, keystore.ErrNotFound) {
			return nil, false, fmt.Errorf("idem: reading keystore: %w", err)
		}
		if len(op.intent) > MaxIntentLength || len(scope) > maxTenantLength {
			if try == 0 && op.intent == "" { // the key may be a record's from before the limits
				continue
			}
			return nil, false, fmt.Errorf("%w: a new record's intent (%d bytes) or tenant (%d bytes) is over MaxIntentLength (%d) or maxTenantLength (%d)",
				ErrInvalidOperation, len(op.intent), len(scope), MaxIntentLength, maxTenantLength)
		}
		// The record carries this clock's times, which other instances judge with theirs
		// (retention, KeyTTL, leases): refuse when it is off (cached; see clockRecheck).
		if err := c.checkWriteClock(ctx, nil); errors.Is(err, ErrClockSkew) {
			return nil, false, &OperationError{Key: op.key, Scope: scope, Intent: op.intent, Kind: ErrClockSkew, Cause: err}
		}
		now := c.cfg.Now()
		rec = buf
		*rec = keystore.Record{
			Scope: scope, Key: op.key, Intent: op.intent, Fingerprint: fp, State: keystore.StatePending,
			Request: keystore.Request{Method: op.method, URL: op.url,
				Header: withoutSecrets(op.header, c.cfg.SecretHeaders...), Body: op.body},
			CreatedAt: now, UpdatedAt: now,
			// Created already claimed (fence 1): the first attempt needs no write of its own.
			Owner: c.cfg.Fleet.Owner, LeaseUntil: now.Add(c.cfg.Fleet.LeaseTTL), Fence: 1,
		}
		err = c.store.Create(ctx, rec)
		if err == nil {
			return rec, true, nil
		}
		if !errors.Is(err, keystore.ErrExists) { // nothing was sent: the caller may simply retry
			if werr := c.withdraw(ctx, rec, err); werr != nil {
				return nil, false, fmt.Errorf("idem: persisting key %q before send: %w; nothing was sent, but the record may exist and could not be withdrawn (%v): continue with this Operation or its intent, not a new key, or Recover may send it later", op.key, err, werr)
			}
			return nil, false, fmt.Errorf("idem: persisting key before send: %w", err)
		}
		// Another process created it between our lookup and Create: look again.
	}
	return nil, false, fmt.Errorf("idem: key %q keeps appearing and vanishing in the keystore", op.key)
}

// requestDiff says which of the parts a fingerprint covers differ between the request a
// record holds and op: the method, the URL (normalised as sent) or the body. Headers are not
// in the fingerprint: they never make a local conflict.
func (c *Client) requestDiff(rec *keystore.Record, op *Operation) string {
	var parts []string
	if rec.Request.Method != op.method {
		parts = append(parts, "the method")
	}
	if c.target(rec.Request.URL) != c.target(op.url) {
		parts = append(parts, "the URL")
	}
	if !bytes.Equal(rec.Request.Body, op.body) {
		parts = append(parts, "the body")
	}
	switch len(parts) {
	case 0: // a fingerprint written by another release, or the record damaged
		return "the method, URL and body are the same, but the record's fingerprint is not theirs"
	case 1:
		return parts[0] + " differs"
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1] + " differ"
}

// conflictAdvice says what the record that holds a key or intent became, and what the caller
// may do with a request that differs from it.
func conflictAdvice(rec *keystore.Record) string {
	switch {
	case revivable(rec):
		return "that request was withdrawn before it was sent and goes out when its intent is retried: send the intent's own bytes, never pay it under a new intent"
	case rec.State == keystore.StateFailed && rec.Reason == reasonKeyConflict:
		// The server's 422: the key is bound there to another payload, whose request may
		// well be paid. "Refused, not paid" led a newcomer to pay again under a new key.
		return "the server refused that request because the key is bound there to another payload (ErrKeyConflict): that payload's request may be paid; never pay again under a new intent, find that payment (its intent, the status endpoint or a lookup)"
	case rec.State == keystore.StateFailed && rec.Reason == keystore.ReasonNotExecuted:
		return fmt.Sprintf("that request was settled as not executed (%s): send this one as a new intent", cmp.Or(rec.Note, "a lookup or a person's verdict"))
	case rec.State == keystore.StateFailed && rec.NotExecuted:
		return "that request was not executed (ErrNotExecuted): send this one as a new intent"
	case rec.State == keystore.StateFailed:
		return fmt.Sprintf("that request failed (HTTP %d, ErrPermanent: refused, not paid): a corrected request is a new intent", rec.LastStatusCode)
	case rec.State == keystore.StateSucceeded:
		return "that request succeeded: it is paid, do not pay it again"
	}
	return fmt.Sprintf("that request is %s and may have been charged: send its own bytes, never pay again under a new intent", rec.State)
}

func (c *Client) lookup(ctx context.Context, op *Operation, scope string) (*keystore.Record, error) {
	if op.intent != "" {
		rec, err := c.getByIntent(ctx, scope, op.intent)
		if !errors.Is(err, keystore.ErrNotFound) {
			return rec, err
		}
	}
	rec, err := c.get(ctx, scope, op.key)
	if err == nil && op.intent != "" && rec.Intent != op.intent {
		return nil, &OperationError{Key: rec.Key, Scope: scope, Intent: op.intent, Kind: ErrKeyConflict,
			Cause: fmt.Errorf("key %q belongs to intent %q", rec.Key, rec.Intent)}
	}
	return rec, err
}

// storedOutcome turns a terminal record into what Do returns, without sending anything.
func (c *Client) storedOutcome(rec *keystore.Record) (*Result, error) {
	switch rec.State {
	case keystore.StateSucceeded:
		res := &Result{Key: rec.Key, Source: outcome.SourceStore}
		if rec.Response != nil {
			res.StatusCode, res.Header, res.Body = rec.Response.StatusCode, rec.Response.Header, rec.Response.Body
		}
		return res, nil
	case keystore.StateManual:
		kind := reasonKind(rec.Reason)
		if kind != ErrInvalidOperation && kind != ErrStoredServerError {
			kind = ErrKeyExpired
		}
		return nil, &OperationError{Key: rec.Key, Scope: rec.Scope, Intent: rec.Intent, Kind: kind,
			Unknown: true, LastStatusCode: rec.LastStatusCode, Cause: errors.New(rec.Error), Stored: true,
			Response: storedResponse(rec)}
	}
	e := &OperationError{Key: rec.Key, Scope: rec.Scope, Intent: rec.Intent, Kind: reasonKind(rec.Reason),
		LastStatusCode: rec.LastStatusCode, Stored: true}
	if rec.Error != "" {
		e.Cause = errors.New(rec.Error)
	}
	switch rec.Reason {
	case keystore.ReasonNotExecuted:
		e.Cause = fmt.Errorf("resolved as not executed: %s", rec.Note)
	case keystore.ReasonWithdrawn:
		e.Cause = errors.New(rec.Note)
	}
	e.Response = storedResponse(rec)
	return nil, e
}

// storedResponse is the record's persisted answer as a Result, nil if it has none.
func storedResponse(rec *keystore.Record) *Result {
	if rec.Response == nil {
		return nil
	}
	return &Result{Key: rec.Key, StatusCode: rec.Response.StatusCode, Header: rec.Response.Header,
		Body: rec.Response.Body, Source: outcome.SourceStore}
}

// withdrawTimeout bounds withdraw's keystore round trips (time.Duration).
const withdrawTimeout = 5 * time.Second

// withdraw settles a record whose Create reported an error: the write may have committed all
// the same (a connection lost after COMMIT), or may still commit (an INSERT waiting on a
// lock). Left pending, Recover would send it later, while the caller, told that nothing was
// sent, pays again under a new key: twice. A record found as Create wrote it is marked
// failed, not executed (ErrNotExecuted for a later Do of its key or intent); where none is
// found, a tombstone takes its key (failed, not executed), so that a late commit fails
// instead. It returns an error when it cannot settle the key: the store fails, or another
// instance holds the record and may have sent it.
func (c *Client) withdraw(ctx context.Context, rec *keystore.Record, createErr error) error {
	if errors.Is(createErr, keystore.ErrClosed) || errors.Is(createErr, keystore.ErrInvalid) {
		return nil // refused before writing anything
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawTimeout)
	defer cancel()
	for range 2 {
		got, err := c.store.Get(ctx, rec.Scope, rec.Key)
		if errors.Is(err, keystore.ErrNotFound) {
			// Not found proves nothing yet: the Create may still land. Take the key first.
			t := *rec
			t.Owner, t.LeaseUntil = "", time.Time{}
			withdrawn(&t, c.cfg.Now())
			if err = c.store.Create(ctx, &t); errors.Is(err, keystore.ErrExists) {
				continue // it landed meanwhile (or the intent is taken): look again
			}
			return err
		}
		if err != nil {
			return err
		}
		switch {
		case got.State.Terminal() && got.NotExecuted && got.Attempts == 0:
			return nil // already withdrawn
		case got.State == keystore.StatePending && got.Attempts == 0 && got.Owner == rec.Owner && got.Fence == rec.Fence:
			withdrawn(got, c.cfg.Now())
			if err := c.store.Update(ctx, got); err != nil {
				return err
			}
			// Give the lease up too: a Do of the intent (here or on another instance, maybe
			// waiting on it now) revives the record and must not wait out this lease first.
			if err := c.store.Release(ctx, got.Scope, got.Key, got.Owner, got.Fence); err != nil && !errors.Is(err, keystore.ErrFenced) {
				c.warn("releasing the lease of a withdrawn record", got, err)
			}
			return nil
		default:
			return fmt.Errorf("it is %s, held by %q (fence %d) after %d attempt(s): another instance took it over and may have sent it", got.State, got.Owner, got.Fence, got.Attempts)
		}
	}
	return errors.New("the key's record kept changing")
}

// withdrawn marks rec failed, not executed: nothing of it was sent.
func withdrawn(rec *keystore.Record, now time.Time) {
	rec.State, rec.NotExecuted, rec.Reason = keystore.StateFailed, true, keystore.ReasonWithdrawn
	rec.Note = withdrawnNote
	touch(rec, now)
}

// withdrawnNote marks a record withdraw wrote (the note is part of the record's meaning).
const withdrawnNote = "withdrawn: the keystore reported an error creating it, and nothing was sent"

// revivable reports a withdrawn record of an intent: a later Do of the intent sends it
// (revive), because the caller was told that nothing was sent and the call may be retried.
// The intent binds it to its key, so no other key can have paid it meanwhile. A withdrawn
// record without an intent stays failed (ErrNotExecuted): its caller may already have paid
// under a new key.
func revivable(rec *keystore.Record) bool {
	return rec.Intent != "" && rec.State == keystore.StateFailed && rec.NotExecuted && rec.Attempts == 0 &&
		(rec.Reason == keystore.ReasonWithdrawn || rec.Reason == keystore.ReasonNotExecuted && rec.Note == withdrawnNote) // the latter: written before ReasonWithdrawn
}

// revive makes a withdrawn record (revivable) pending again, not executed, so that the call
// sends it without asking (after recording the send: see call.run). The write is fenced: a
// concurrent revival by another instance wins or loses as a whole, and the lease (Claim)
// decides which instance sends.
func (c *Client) revive(ctx context.Context, rec *keystore.Record) error {
	rec.State, rec.Reason, rec.Note, rec.Error = keystore.StatePending, "", "", ""
	rec.NotExecuted = true
	touch(rec, c.cfg.Now())
	if err := c.store.Update(ctx, rec); err != nil {
		return fmt.Errorf("idem: sending intent %q, withdrawn after a keystore error, again: %w; nothing was sent", rec.Intent, err)
	}
	return nil
}

// touch sets rec.UpdatedAt to now, unless it is later already: a clock stepped back must not
// move it back, since the time a key was last sent is judged from it (tooSoonForNotExecuted).
func touch(rec *keystore.Record, now time.Time) {
	if now.After(rec.UpdatedAt) {
		rec.UpdatedAt = now
	}
}
