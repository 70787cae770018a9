package idem

import "sync/atomic"

// Stats are the client's counters since it was created. Together they tell normal retries
// from a runaway client: replays, key conflicts, same-key concurrency, expired keys and
// budget denials should stay near zero in a healthy service.
type Stats struct {
	Calls              int64 // Do calls that reached the send stage, plus records Recover ran
	Succeeded          int64 // of Calls, those that ended with a Result (a Do answered from the keystore is not a call)
	Failed             int64 // of Calls, those that ended failed (permanent answer or key conflict)
	Attempts           int64 // requests sent
	Retries            int64 // resends scheduled
	KeyStatusChecks    int64 // status-endpoint asks
	Replays            int64 // answers the server marked Idempotent-Replayed
	KeyConflicts       int64 // key reuse: answers saying so (422, or 400 idempotency_error), and requests refused locally because their key or intent holds another request
	SameKeyConcurrency int64 // calls that waited for another call of the same key or intent
	KeyExpired         int64 // unknown outcomes with a key past KeyTTL: manual reconcile
	InProgress         int64 // 409 "in progress" answers waited on
	InProgressTimeouts int64 // calls that ran out of attempts while the server was in progress
	UnknownOutcomes    int64 // attempts whose outcome was unknown (timeout, reset, 5xx), plus pending records resumed by Do or Recover
	UnknownResolved    int64 // unknown outcomes the status endpoint resolved
	StillUnknown       int64 // calls that ended with the outcome still unknown
	FinalFailures      int64 // calls that gave up without a result, for any reason (see event.GiveUp)
	BudgetDenied       int64 // retries refused by the retry budget
	// BudgetAvailable is the tokens left in the client-wide retry budget (Config.Budget) when
	// the snapshot was taken: a gauge, not a counter. -1 when the budget is disabled.
	BudgetAvailable int64
	ThrottledWaits  int64 // waits that honoured a server's Retry-After
	Recovered       int64 // records Recover brought to a final state
	// StoredServerErrors counts calls that ended on a 5xx the server stored for the key
	// (ErrStoredServerError): execution began, effect unknown, record manual.
	StoredServerErrors int64
	Lookups            int64 // Config.Lookup asks
	ResolvedByLookup   int64 // manual records Config.Lookup settled (executed or not executed)
	ResolvedByCaller   int64 // manual records settled through Client.Resolve
	DamagedRecords     int64 // undecodable records Recover skipped (see DamagedRecordsError)
	// ClaimsLost counts calls that found, by a fenced write (keystore.ErrFenced), that another
	// instance took their record over: they stopped sending and returned ErrLeaseLost.
	ClaimsLost int64
	// OrphansReclaimed counts pending records this client took over with no live lease on
	// them: any such record Recover or the background reclaimer (Config.Fleet.ReclaimInterval)
	// claimed (left by a dead instance or process, or released by a call that gave up), and
	// records Do claimed from another instance whose lease had expired (its owner died).
	OrphansReclaimed int64
	// LeaseWaits counts Do calls that found their record claimed by another instance and
	// waited for it to end or its lease to expire.
	LeaseWaits int64
	// ClockSkewRefusals counts operations refused with ErrClockSkew: this client's clock and
	// the keystore's differed by more than Config.Fleet.MaxClockSkew before a retention purge, an
	// orphan claim or a lease takeover. Should be zero; non-zero means a host's clock is off.
	ClockSkewRefusals int64
}

type counters struct {
	calls, succeeded, failed, attempts, retries, statusChecks, replays, keyConflicts atomic.Int64
	sameKey, keyExpired, inProgress, inProgressTimeouts, unknown, unknownResolved    atomic.Int64
	stillUnknown, finalFailures, budgetDenied, throttled, recovered                  atomic.Int64
	storedServerErrors, lookups, resolvedByLookup, resolvedByCaller                  atomic.Int64
	damaged, claimsLost, orphans, leaseWaits, clockSkew                              atomic.Int64
}

// Stats returns a snapshot of the counters. Safe to call at any time (zero for a nil Client).
func (c *Client) Stats() Stats {
	if c == nil {
		return Stats{}
	}
	s := &c.stats
	out := Stats{
		Calls: s.calls.Load(), Succeeded: s.succeeded.Load(), Failed: s.failed.Load(),
		Attempts: s.attempts.Load(), Retries: s.retries.Load(), KeyStatusChecks: s.statusChecks.Load(),
		Replays: s.replays.Load(), KeyConflicts: s.keyConflicts.Load(), SameKeyConcurrency: s.sameKey.Load(),
		KeyExpired: s.keyExpired.Load(), InProgress: s.inProgress.Load(), InProgressTimeouts: s.inProgressTimeouts.Load(),
		UnknownOutcomes: s.unknown.Load(), UnknownResolved: s.unknownResolved.Load(), StillUnknown: s.stillUnknown.Load(),
		FinalFailures: s.finalFailures.Load(), BudgetDenied: s.budgetDenied.Load(), ThrottledWaits: s.throttled.Load(),
		Recovered: s.recovered.Load(), StoredServerErrors: s.storedServerErrors.Load(), Lookups: s.lookups.Load(),
		ResolvedByLookup: s.resolvedByLookup.Load(), ResolvedByCaller: s.resolvedByCaller.Load(),
		DamagedRecords: s.damaged.Load(), ClaimsLost: s.claimsLost.Load(), OrphansReclaimed: s.orphans.Load(),
		LeaseWaits: s.leaseWaits.Load(), ClockSkewRefusals: s.clockSkew.Load(),
		BudgetAvailable: -1,
	}
	if c.budget != nil {
		out.BudgetAvailable = int64(c.budget.tokens())
	}
	return out
}
