// Package idemotel exports an idem.Client's counters as OpenTelemetry metrics, and its
// calls as OpenTelemetry traces (Tracer: a span per call, a client span per attempt with
// http.request.resend_count, status checks, waits and lookups as events; see trace.go).
//
// Register creates asynchronous (observable) Int64 counters, and one gauge, on a
// metric.Meter. All of them are fed from a single snapshot of Client.Stats taken in one
// callback at each collection, so the values exported together are consistent with each
// other. idemotel depends on the OpenTelemetry metric API only: the application chooses
// the SDK and the exporter.
//
//	reg, err := idemotel.Register(otel.Meter("payments"), client)
//	if err != nil { ... }
//	defer reg.Unregister()
//
// # Reading the counters: normal retries or a runaway client
//
// In a healthy service, idem.attempts is a little above idem.calls, idem.retries is small
// and tracks transient 429/503/5xx answers, idem.unknown_outcomes is matched by
// idem.unknown_resolved, and these stay at (or near) zero:
//
//   - idem.replays: the server answered from its idempotency store. A steady rate means
//     callers are re-running intents that already completed (a resumed batch, a restarted
//     worker), or that responses are being lost after the server committed.
//   - idem.key_conflicts: a key was reused with another payload (422). A programming error
//     in the caller: a key derived from something other than the intent.
//   - idem.same_key_concurrency: two calls in this process raced on one key or intent and
//     one waited. A few are benign (a user double-clicking); many mean duplicated work.
//   - idem.key_expired: an unknown outcome whose key is past the server's retention window.
//     Each one is a record for a person to reconcile.
//   - idem.still_unknown: calls that ended without learning whether the server executed
//     them. Each leaves a pending record for Recover.
//   - idem.budget_denied: the retry budget refused retries. Zero in normal operation; it
//     rising means an outage (the budget is doing its job, capping the load this client
//     adds) or a client that retries far more than its successes pay for.
//
// A runaway client shows as idem.attempts growing much faster than idem.calls (retry
// amplification), idem.retries and idem.throttled_waits climbing together, and
// idem.retry_budget.available falling to zero.
package idemotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/metric"

	"github.com/idemkit/idem"
)

// counter is one observable counter fed from a Stats snapshot.
type counter struct {
	name, unit, desc string
	value            func(*idem.Stats) int64
}

// counters lists every counter Register creates, in the order of idem.Stats.
var counters = []counter{
	{"idem.calls", "{call}",
		"Do calls that reached the send stage, plus records Recover ran. The denominator of attempts per call.",
		func(s *idem.Stats) int64 { return s.Calls }},
	{"idem.succeeded", "{call}",
		"Calls that ended with a successful result (2xx answer, replay, status endpoint or keystore).",
		func(s *idem.Stats) int64 { return s.Succeeded }},
	{"idem.failed", "{call}",
		"Calls that ended failed: a permanent answer (validation, auth) or a key conflict. Record state failed.",
		func(s *idem.Stats) int64 { return s.Failed }},
	{"idem.attempts", "{request}",
		"Requests sent to the server, first attempts and retries. Much faster growth than idem.calls is retry amplification.",
		func(s *idem.Stats) int64 { return s.Attempts }},
	{"idem.retries", "{retry}",
		"Resends scheduled with the same key. Tracks transient 429/503/5xx and network errors; a climb without an outage means a runaway client.",
		func(s *idem.Stats) int64 { return s.Retries }},
	{"idem.status_checks", "{request}",
		"Requests to the status endpoint asking whether a key was executed.",
		func(s *idem.Stats) int64 { return s.KeyStatusChecks }},
	{"idem.replays", "{response}",
		"Answers the server marked Idempotent-Replayed: an intent that had already completed was sent again. Should stay near zero.",
		func(s *idem.Stats) int64 { return s.Replays }},
	{"idem.key_conflicts", "{response}",
		"422 answers: a key reused with another payload. A programming error in the caller; should be zero.",
		func(s *idem.Stats) int64 { return s.KeyConflicts }},
	{"idem.same_key_concurrency", "{call}",
		"Calls that waited for another call of the same key or intent in this process. Many mean duplicated work.",
		func(s *idem.Stats) int64 { return s.SameKeyConcurrency }},
	{"idem.key_expired", "{operation}",
		"Unknown outcomes whose key is past the server's retention window: never resent, left for manual reconciliation.",
		func(s *idem.Stats) int64 { return s.KeyExpired }},
	{"idem.in_progress", "{response}",
		"409 answers (the server is still executing the key) that were waited on.",
		func(s *idem.Stats) int64 { return s.InProgress }},
	{"idem.in_progress_timeouts", "{call}",
		"Calls that ran out of attempts while the server still reported the key in progress.",
		func(s *idem.Stats) int64 { return s.InProgressTimeouts }},
	{"idem.unknown_outcomes", "{request}",
		"Attempts whose outcome was unknown (timeout or reset after write, 500/502/504).",
		func(s *idem.Stats) int64 { return s.UnknownOutcomes }},
	{"idem.unknown_resolved", "{request}",
		"Unknown outcomes the status endpoint resolved (completed, or not found and safe to resend).",
		func(s *idem.Stats) int64 { return s.UnknownResolved }},
	{"idem.still_unknown", "{call}",
		"Calls that ended with the outcome still unknown; each leaves a pending record for Recover.",
		func(s *idem.Stats) int64 { return s.StillUnknown }},
	{"idem.final_failures", "{call}",
		"Calls that gave up without a result, for any reason: permanent errors, key conflicts, exhausted attempts, unknown outcomes, budget denials.",
		func(s *idem.Stats) int64 { return s.FinalFailures }},
	{"idem.budget_denied", "{retry}",
		"Retries the client-wide retry budget refused. Zero when healthy; rising during an outage or for a runaway client.",
		func(s *idem.Stats) int64 { return s.BudgetDenied }},
	{"idem.throttled_waits", "{wait}",
		"Waits that honoured a server's Retry-After (429/503/409/202 with Retry-After).",
		func(s *idem.Stats) int64 { return s.ThrottledWaits }},
	{"idem.recovered", "{operation}",
		"Records Client.Recover brought to a final state (succeeded, failed or manual).",
		func(s *idem.Stats) int64 { return s.Recovered }},
	{"idem.stored_server_errors", "{call}",
		"Calls that ended on a 5xx the server stored for the key: execution began, effect unknown, record manual until a business lookup or a person settles it. Never a failure; paying again without a lookup risks a double charge.",
		func(s *idem.Stats) int64 { return s.StoredServerErrors }},
	{"idem.lookups", "{request}",
		"Business lookups (Config.Lookup) asked about records their key could not settle.",
		func(s *idem.Stats) int64 { return s.Lookups }},
	{"idem.resolved_by_lookup", "{operation}",
		"Manual records the business lookup settled, as executed or not executed.",
		func(s *idem.Stats) int64 { return s.ResolvedByLookup }},
	{"idem.resolved_by_caller", "{operation}",
		"Manual records settled through Client.Resolve (an application's or operator's verdict).",
		func(s *idem.Stats) int64 { return s.ResolvedByCaller }},
	{"idem.damaged_records", "{record}",
		"Keystore records Recover could not decode: skipped, reported (idem.DamagedRecordsError) and left untouched on disk for a person to inspect.",
		func(s *idem.Stats) int64 { return s.DamagedRecords }},
	{"idem.claims_lost", "{call}",
		"Calls that found, by a fenced keystore write, that another instance had taken their record over: they stopped sending (ErrLeaseLost). Non-zero means leases expired under live calls: lengthen Config.Fleet.LeaseTTL or look for stalls.",
		func(s *idem.Stats) int64 { return s.ClaimsLost }},
	{"idem.orphans_reclaimed", "{operation}",
		"Pending records without a live lease (a dead instance's, or released by a call that gave up) taken over by Recover or the background reclaimer.",
		func(s *idem.Stats) int64 { return s.OrphansReclaimed }},
	{"idem.lease_waits", "{call}",
		"Do calls that found their record claimed by another instance and waited for it.",
		func(s *idem.Stats) int64 { return s.LeaseWaits }},
	{"idem.clock_skew_refusals", "{operation}",
		"Retention purges, orphan claims and lease takeovers refused because this instance's clock and the keystore's differed by more than Config.Fleet.MaxClockSkew (idem.ErrClockSkew). Should be zero: non-zero means the host's clock is off; fix its NTP.",
		func(s *idem.Stats) int64 { return s.ClockSkewRefusals }},
}

// Register creates the idem.* observable counters and, when the client has a retry budget,
// the idem.retry_budget.available gauge on meter, all observed from one Client.Stats
// snapshot in one callback. Unregister the returned Registration to stop observing c (the
// instruments stay registered on the meter, with no more values).
func Register(meter metric.Meter, c *idem.Client) (metric.Registration, error) {
	if meter == nil {
		return nil, errors.New("idemotel: nil meter")
	}
	if c == nil {
		return nil, errors.New("idemotel: nil client")
	}
	insts := make([]metric.Int64ObservableCounter, len(counters))
	all := make([]metric.Observable, 0, len(counters)+1)
	for i, ct := range counters {
		inst, err := meter.Int64ObservableCounter(ct.name, metric.WithUnit(ct.unit), metric.WithDescription(ct.desc))
		if err != nil {
			return nil, err
		}
		insts[i] = inst
		all = append(all, inst)
	}
	var budget metric.Int64ObservableGauge
	if c.Stats().BudgetAvailable >= 0 { // -1: the budget is disabled

		var err error
		budget, err = meter.Int64ObservableGauge("idem.retry_budget.available", metric.WithUnit("{token}"),
			metric.WithDescription("Tokens left in the client-wide retry budget. At zero, calls get their first attempt only: an outage, or a client retrying more than its successes pay for."))
		if err != nil {
			return nil, err
		}
		all = append(all, budget)
	}
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := c.Stats()
		for i, ct := range counters {
			o.ObserveInt64(insts[i], ct.value(&s))
		}
		if budget != nil {
			o.ObserveInt64(budget, s.BudgetAvailable)
		}
		return nil
	}, all...)
}
