package idem

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/idemkit/idem/keystore"
)

// Reconciled is one record's outcome after Recover worked on it.
type Reconciled struct {
	// Record is the record as persisted after reconciliation (a copy).
	Record *keystore.Record
	// Result is the successful answer, when the operation succeeded.
	Result *Result
	// Err is the *OperationError when it did not: ErrPermanent (failed) or ErrKeyConflict
	// (refused: see its doc, never a reason to pay again),
	// ErrNotExecuted (settled as not executed by Config.Lookup: the application may pay
	// again under a new intent), ErrKeyExpired or ErrStoredServerError (manual: a lookup or
	// a person must settle it), or a still-pending stop such as ErrOutcomeUnknown, which a
	// later Recover tries again.
	Err error
}

// RecoverReport counts what one Recover run did.
type RecoverReport struct {
	Pending   int // pending records found
	Skipped   int // held by a live lease: in flight in this process or in another instance
	Succeeded int // reconciled to success (status endpoint, replay or a fresh send)
	Failed    int // reconciled to a permanent failure, or settled as not executed
	Manual    int // a stored 5xx, a key past KeyTTL with an unknown outcome, or a record that cannot be sent: reported, never resent
	Unknown   int // still pending after this run
	Purged    int // terminal records older than Config.Retention removed
	// Resolved counts manual records found waiting (a stored 5xx, a key past KeyTTL) that
	// Config.Lookup settled in this run, as executed or not executed.
	Resolved int
}

// Recover reconciles every pending record, typically at start-up after a crash: status
// endpoint first, resend with the same key only when that is safe (the server says it never
// executed the key, or there is no status endpoint and the key is younger than KeyTTL). A key
// older than KeyTTL whose outcome cannot be learned is never resent: it becomes manual and is
// reported. Each outcome is written to the Store, then handed to handle (which may be nil) so
// that the application can, say, mark its order paid; handle is called from several
// goroutines at once (Config.RecoverConcurrency), so it must be safe for that.
//
// What is durable when handle runs depends on the Store. A failed outcome (ErrPermanent,
// ErrKeyConflict, or not executed), and a manual one whose Config.Lookup acts (a cancel by
// reference), is written with Update and is durable. Other outcomes
// (succeeded, manual, still pending) are written with UpdateDeferred when the store is a
// keystore.DeferredUpdater, as keystore/boltstore is: visible to reads at once, durable only
// with the store's next commit, a flush within boltstore's Options.FlushDelay (50 ms by
// default), or the store's Close. A process that exits without closing the store can lose
// them: the records are then still pending, and the next Recover asks the status endpoint
// again and hands the same outcomes to handle again. So handle must be idempotent (marking
// an order paid twice must do no harm), and a process should Close the store before it
// exits (Client.Close does not). Memory and keystore/pgstore write every outcome
// synchronously (Memory survives no restart in any case). Recover returns only after every
// handle call has returned, even when ctx ends. If handle panics, the other records are
// still reconciled and handed to it, and Recover then panics with the first value on the
// caller's goroutine (where a deferred recover can catch it) instead of a worker's.
// A record the server still processes is asked about up to Policy.MaxKeyStatusChecks times,
// waiting its Retry-After between asks: run Recover on its own goroutine if start-up must
// not wait for that.
//
// Recover is safe to run while Do calls are in flight, here or in other instances sharing
// the Store: it first takes the orphans (pending records with no live lease: never claimed,
// released, or left by a dead instance) with keystore.Store.ClaimExpired, in batches no
// larger than its idle workers, so that instances recovering at once never send one key
// twice (Stats.OrphansReclaimed); records it leaves pending are released when it ends.
// Records another instance, or a call in this process, holds a live lease on are skipped
// (RecoverReport.Skipped). A listing then claims one at a time the pending records the
// batches did not take. While Do calls are in flight on c, those batches start at most
// Config.RecoverBusyRate records a second (6,500 by default), leaving the cores to the calls
// (unpaced when none is; the pace never stops a Recover). Records are sent with their
// persisted headers, which never include credentials: set Config.Credentials. opts apply to every record, as with Do. It also purges
// terminal records older than Config.Retention. Pending records are read a page at a time
// when the store is a keystore.Pager; a record that cannot be decoded is then skipped, left
// as it is, counted in Stats.DamagedRecords and passed to Hooks.OnDamagedRecord, every other
// record is reconciled, and the error is a *DamagedRecordsError listing the skipped keys.
// With Config.Lookup set, it also asks the lookup about every manual record waiting for
// reconciliation (a stored 5xx, a key past KeyTTL) and persists a conclusive verdict
// (RecoverReport.Resolved; handle gets those too). A manual record is never resent.
// When the store has a clock (keystore.Clock, shared by a fleet) and Config.Now differs from
// it by more than Config.Fleet.MaxClockSkew, Recover purges and claims nothing and returns a
// *ClockSkewError (ErrClockSkew): fix the host's clock, then run it again; the same error
// ends it if the clock steps during the run (checked before each claim of other instances'
// records). Otherwise the error is non-nil only when the keystore cannot be read, or ctx
// ended (or is nil: ErrInvalidOperation; a nil or zero *Client: ErrInvalidConfig).
func (c *Client) Recover(ctx context.Context, handle func(Reconciled), opts ...CallOption) (RecoverReport, error) {
	var rep RecoverReport
	if err := checkEntry(c, ctx); err != nil {
		return rep, err
	}
	c.enter()
	defer c.exit()
	s, err := c.settings(opts)
	if err != nil {
		return rep, err
	}
	// handle and the application's code in each call (a KeyStatusFunc, a hook, the store)
	// run on Recover's workers, where a panic would end the process whatever the caller
	// defers: the first is kept and raised again here once every worker is done.
	var guard panicGuard
	defer func() {
		if p := recover(); p != nil { // Recover's own panic goes first, a worker's after
			panic(p)
		}
		guard.raise()
	}()
	if h := handle; h != nil {
		handle = func(out Reconciled) { guard.run(func() { h(out) }) }
	}
	// The purge and the claims below act on other instances' records by this clock.
	now, _, err := c.checkClockAt(ctx, opPurge, nil)
	if err != nil {
		return rep, err
	}
	n, err := c.purgeOld(ctx, now.Add(-c.cfg.Retention)) // the instant checked, not a later reading
	if err != nil {
		return rep, fmt.Errorf("idem: purging old records: %w", err)
	}
	rep.Purged = n
	var mu sync.Mutex
	record := func(out Reconciled, ran bool) {
		mu.Lock()
		rep.count(out, ran)
		mu.Unlock()
		if ran && handle != nil {
			handle(out)
		}
	}
	// First the orphans, claimed in batches: records other instances hold are left to them.
	claimed, claimErr := c.reclaimPass(ctx, s, 1, record, &guard)
	if errors.Is(claimErr, ErrClockSkew) { // the clock stepped since the purge's check
		return rep, claimErr
	}
	if claimErr != nil {
		c.warnf("claiming orphaned records; falling back to one claim per listed record", claimErr)
	}
	rep.Pending = len(claimed)

	// Then one listing: it reports damaged records, finds manual records for Config.Lookup,
	// and claims one by one the pending records the batches did not take (created since, or
	// left by an ended process of an exclusive store, or all of them if ClaimExpired failed).
	states := []keystore.State{keystore.StatePending}
	if c.cfg.Lookup != nil {
		states = append(states, keystore.StateManual)
	}
	work := make(chan *keystore.Record)
	var takeoverErr error // a takeover the clock check refused (the clock stepped during the run)
	var wg sync.WaitGroup
	// The workers end before Recover returns, a panic on this goroutine included (a Pager,
	// Hooks.OnDamagedRecord): none may send after the caller has moved on.
	stopWorkers := sync.OnceFunc(func() { close(work); wg.Wait() })
	defer stopWorkers()
	for range c.cfg.RecoverConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rec := range work {
				guard.run(func() {
					if rec.State == keystore.StateManual {
						out, ran := c.resolveOne(ctx, rec)
						if ran {
							mu.Lock()
							rep.Resolved++
							mu.Unlock()
							if handle != nil {
								handle(out)
							}
						}
						return
					}
					out, ran, err := c.recoverOne(ctx, s, rec)
					if err != nil {
						mu.Lock()
						takeoverErr = cmp.Or(takeoverErr, err)
						mu.Unlock()
					}
					record(out, ran)
				})
			}
		}()
	}
	// Records are streamed a page at a time (keystore.Pager), never all in memory.
	var damaged []keystore.DamagedRecord
	err = keystore.ListAll(ctx, c.store, states, 0, func(p keystore.Page) error {
		damaged = append(damaged, c.onDamaged(p.Damaged)...)
		for _, rec := range p.Records {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if rec == nil || (rec.State == keystore.StatePending && claimed[scopedKey{rec.Scope, rec.Key}]) {
				continue
			}
			if rec.State == keystore.StatePending {
				mu.Lock()
				rep.Pending++
				mu.Unlock()
				if rec.Live(c.cfg.Now()) && rec.Owner != c.cfg.Fleet.Owner && !c.deadOwner(rec) {
					mu.Lock()
					rep.Skipped++ // another instance is sending it
					mu.Unlock()
					continue
				}
			}
			work <- rec
		}
		return nil
	})
	stopWorkers()
	if err != nil && ctx.Err() == nil {
		return rep, fmt.Errorf("idem: listing pending records: %w", err)
	}
	if ctx.Err() != nil {
		return rep, ctx.Err()
	}
	if takeoverErr != nil {
		return rep, takeoverErr
	}
	if len(damaged) > 0 {
		return rep, &DamagedRecordsError{Records: damaged}
	}
	return rep, nil
}

// unsendable marks a record that can never be sent as manual, so that Recover reports it
// once instead of failing on it at every start.
// checkStoredRequest refuses to send a stored request that no longer hashes to the record's
// fingerprint (normalised, or over the URL as written for records from before
// normalisation): a body or URL damaged in the keystore that still decodes would be sent
// under the key, a different payment. It also catches a record persisted under another
// Config.BaseURL with an absolute URL, which this client would fingerprint differently.
func (c *Client) checkStoredRequest(rec *keystore.Record) error {
	r := &rec.Request
	if Fingerprint(r.Method, c.target(r.URL), r.Body) == rec.Fingerprint ||
		Fingerprint(r.Method, r.URL, r.Body) == rec.Fingerprint {
		return nil
	}
	return fmt.Errorf("the stored request (%s %s, %d bytes of body) does not match the record's fingerprint %.12s: damaged in the keystore, or persisted under another Config.BaseURL; not sent",
		r.Method, r.URL, len(r.Body), rec.Fingerprint)
}

func (c *Client) unsendable(ctx context.Context, rec *keystore.Record, cause error) Reconciled {
	rec.State, rec.Reason, rec.Error = keystore.StateManual, reasonInvalid, cause.Error()
	touch(rec, c.cfg.Now())
	if err := c.store.Update(context.WithoutCancel(ctx), rec); err != nil {
		c.warn("marking an unsendable record manual", rec, err)
	}
	return Reconciled{Record: rec.Clone(), Err: &OperationError{Key: rec.Key, Scope: rec.Scope, Intent: rec.Intent,
		Kind: ErrInvalidOperation, Unknown: true, Cause: cause}}
}

func (rep *RecoverReport) count(out Reconciled, ran bool) {
	switch {
	case !ran:
		rep.Skipped++
	case out.Err == nil:
		rep.Succeeded++
	case errors.Is(out.Err, ErrKeyExpired), errors.Is(out.Err, ErrInvalidOperation),
		errors.Is(out.Err, ErrStoredServerError):
		rep.Manual++
	case errors.Is(out.Err, ErrPermanent), errors.Is(out.Err, ErrKeyConflict), errors.Is(out.Err, ErrNotExecuted):
		rep.Failed++
	default:
		rep.Unknown++
	}
}

// recoverOne claims and reconciles one listed pending record under its key (and intent)
// lock; ran is false when a call in this process holds it, another instance holds its lease,
// or it is no longer pending. err is the clock check's refusal of a takeover (checkClock).
func (c *Client) recoverOne(ctx context.Context, s callSettings, rec *keystore.Record) (Reconciled, bool, error) {
	if rec.Intent != "" {
		unlock, ok := c.locks.tryLock(intentLockName(rec.Scope, rec.Intent))
		if !ok {
			return Reconciled{}, false, nil
		}
		defer unlock()
	}
	unlock, ok := c.locks.tryLock(keyLockName(rec.Scope, rec.Key))
	if !ok {
		return Reconciled{}, false, nil
	}
	defer unlock()
	fresh, err := c.get(ctx, rec.Scope, rec.Key)
	if err != nil || fresh.State != keystore.StatePending {
		return Reconciled{}, false, nil
	}
	if c.takesOver(fresh) {
		if err := c.checkClock(ctx, opTakeover, fresh); err != nil {
			if !errors.Is(err, ErrClockSkew) {
				c.warn("checking the clock before a takeover", fresh, err)
			}
			return Reconciled{}, false, err
		}
	}
	fresh, err = c.store.Claim(ctx, fresh.Scope, fresh.Key, c.leaseFor(fresh))
	if err != nil { // claimed by another instance, finished meanwhile, or unreadable
		if !errors.Is(err, keystore.ErrClaimed) && !errors.Is(err, keystore.ErrNotPending) {
			c.warn("claiming a pending record", rec, err)
		}
		return Reconciled{}, false, nil
	}
	c.stats.orphans.Add(1) // no live lease (released, expired, or an ended process's)
	out, ran, _ := c.reconcileClaimed(ctx, s, fresh, false)
	return out, ran, nil
}

// resolveOne asks Config.Lookup about a manual record under its key (and intent) lock; ran
// is false when a call holds it, it is no longer manual, or the lookup could not tell.
func (c *Client) resolveOne(ctx context.Context, rec *keystore.Record) (Reconciled, bool) {
	if rec.Intent != "" {
		unlock, ok := c.locks.tryLock(intentLockName(rec.Scope, rec.Intent))
		if !ok {
			return Reconciled{}, false
		}
		defer unlock()
	}
	unlock, ok := c.locks.tryLock(keyLockName(rec.Scope, rec.Key))
	if !ok {
		return Reconciled{}, false
	}
	defer unlock()
	fresh, err := c.get(ctx, rec.Scope, rec.Key)
	if err != nil || fresh.State != keystore.StateManual {
		return Reconciled{}, false
	}
	_, stop := c.storedOutcome(fresh)
	res, err, ok := c.businessLookup(ctx, fresh, nil, stop)
	if !ok {
		return Reconciled{}, false
	}
	return Reconciled{Record: fresh.Clone(), Result: res, Err: err}, true
}
