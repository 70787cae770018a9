package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

// summary is the run's result: the table, or with -json one JSON object.
type summary struct {
	Mode         string `json:"mode"`              // "embedded" (in-process idemtest server) or "target"
	Dialect      string `json:"dialect,omitempty"` // -dialect, absent for idem
	Store        string `json:"store"`             // "bbolt" (one sender at a time) or "postgres" (a fleet)
	Instances    int    `json:"instances"`         // sender processes at once
	Intents      int    `json:"intents"`
	Invalid      int    `json:"invalid"` // generated with amount 0 on purpose
	Succeeded    int    `json:"succeeded"`
	Failed       int    `json:"failed"`
	Pending      int    `json:"pending"`      // no final state, may have executed: lost
	NotExecuted  int    `json:"not_executed"` // still pending, known never executed: not lost
	ExecutedOnce int    `json:"executed_once"`
	Duplicates   int    `json:"duplicates"`
	Lost         int    `json:"lost"`
	// Payments a sender acknowledged (Do returned its id), and those of them the ledger does
	// not show charged exactly once under that id (embedded server only): must be 0.
	Acknowledged int `json:"acknowledged"`
	AckWrong     int `json:"acknowledged_wrong"`
	// Records left pending at the end, any try: every record ends final or manual.
	RecordsPending int `json:"records_pending"`

	// idem's counters, summed over every child's last snapshot and the parent's final client.
	Attempts        int64 `json:"attempts"`
	Retries         int64 `json:"retries"`
	KeyStatusChecks int64 `json:"status_checks"`
	Replays         int64 `json:"replays"`
	ThrottledWaits  int64 `json:"throttled_waits"`
	UnknownOutcomes int64 `json:"unknown_outcomes"`
	UnknownResolved int64 `json:"unknown_resolved"`
	FinalFailures   int64 `json:"final_failures"` // calls that gave up without a result
	BudgetDenied    int64 `json:"budget_denied"`
	// The fleet: records taken over from dead (or giving-up) senders, and stale owners whose
	// fenced write was refused.
	OrphansReclaimed int64 `json:"orphans_reclaimed"`
	ClaimsLost       int64 `json:"claims_lost"`
	LeaseWaits       int64 `json:"lease_waits"`

	// Keys the server stored a 5xx for, those the search by reference settled, and payments
	// still waiting for a person (never paid again blindly).
	StoredErrors        int `json:"stored_errors"`
	ReconciledByLookup  int `json:"reconciled_by_lookup"`
	NeedsReconciliation int `json:"needs_reconciliation"`
	// Charges the dialect's cancel by reference (adyen) canceled, in the embedded server's
	// ledger: every count per reference above is net of them.
	Canceled int `json:"canceled,omitempty"`
	// Of NeedsReconciliation, payments left pending with an unknown outcome no settling route
	// could tell (the others are manual records).
	UnknownPending int `json:"needs_reconciliation_unknown,omitempty"`

	NewIntents       int     `json:"new_intents"`       // new intents after a key settled as not executed
	Crashes          int     `json:"crashes"`           // SIGKILLs that interrupted a sender
	CrashesRequested int     `json:"crashes_requested"` // -crashes
	Children         int     `json:"children"`
	PendingFound     int     `json:"pending_found"` // pending records Recover found
	Recovered        int     `json:"recovered"`     // ... and brought to a final state
	Calls            int     `json:"calls"`         // Do calls that did network work
	P50              float64 `json:"p50_ms"`
	P99              float64 `json:"p99_ms"`

	// What the embedded server saw (absent with -target).
	ServerRequests        *int `json:"server_requests,omitempty"`
	ServerKeyStatusChecks *int `json:"server_status_checks,omitempty"`
	ServerExecutions      *int `json:"server_executions,omitempty"`

	CrashLog           []crash  `json:"crash_log"`
	DuplicateDetails   []string `json:"duplicate_details,omitempty"`
	LostDetails        []string `json:"lost_details,omitempty"`
	AckWrongDetails    []string `json:"acknowledged_wrong_details,omitempty"`
	NotExecutedDetails []string `json:"not_executed_details,omitempty"`
	// One line per payment needing reconciliation: its last key, state and reason, and in
	// embedded mode the ledger's charges of the reference.
	NeedsReconciliationDetails []string `json:"needs_reconciliation_details,omitempty"`
	WallMS                     int64    `json:"wall_ms"`
	serverStatsString          string
	unanswered                 int // of NotExecuted: keys the API never answered at all
}

// addStats adds one process's counters.
func (s *summary) addStats(st idem.Stats) {
	s.Attempts += st.Attempts
	s.Retries += st.Retries
	s.KeyStatusChecks += st.KeyStatusChecks
	s.Replays += st.Replays
	s.ThrottledWaits += st.ThrottledWaits
	s.UnknownOutcomes += st.UnknownOutcomes
	s.UnknownResolved += st.UnknownResolved
	s.FinalFailures += st.FinalFailures
	s.BudgetDenied += st.BudgetDenied
	s.OrphansReclaimed += st.OrphansReclaimed
	s.ClaimsLost += st.ClaimsLost
	s.LeaseWaits += st.LeaseWaits
}

func (s *summary) addVerdict(v verdict) {
	s.Succeeded, s.Failed, s.Pending = v.Succeeded, v.Failed, v.Pending
	s.ExecutedOnce, s.NewIntents = v.ExecutedOnce, v.NewIntents
	s.Duplicates, s.DuplicateDetails = len(v.Duplicates), v.Duplicates
	s.Lost, s.LostDetails = len(v.Lost), v.Lost
	s.NotExecuted, s.NotExecutedDetails, s.unanswered = len(v.NotExecuted), v.NotExecuted, v.Unanswered
	s.StoredErrors, s.ReconciledByLookup, s.NeedsReconciliation = v.StoredErrors, v.ReconciledByLookup, v.NeedsReconciliation
	s.Canceled, s.UnknownPending, s.NeedsReconciliationDetails = v.Canceled, v.UnknownPending, v.Unsettled
}

func (s *summary) addServer(st idemtest.Stats) {
	s.ServerRequests, s.ServerKeyStatusChecks, s.ServerExecutions = &st.Requests, &st.KeyStatusChecks, &st.Executions
	s.serverStatsString = st.String()
}

// latencies sets the percentiles (nearest rank) of the calls' latencies in ms.
func (s *summary) latencies(ms []float64) {
	s.Calls = len(ms)
	if len(ms) == 0 {
		return
	}
	ms = slices.Clone(ms)
	slices.Sort(ms)
	rank := func(q float64) float64 { return ms[min(len(ms)-1, int(q*float64(len(ms))))] }
	s.P50, s.P99 = rank(0.50), rank(0.99)
}

// write prints s as the table, or as one JSON object.
func (s *summary) write(w io.Writer, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		return enc.Encode(s)
	}
	fmt.Fprintln(w)
	// Every row fits in 100 columns: 37 for name and value, the rest for the note.
	row := func(name string, v any, note string) {
		fmt.Fprintf(w, "  %-24s %8v  %s\n", name, v, note)
	}
	row("intents", s.Intents, fmt.Sprintf("payments, %d invalid on purpose (amount 0)", s.Invalid))
	row("succeeded", s.Succeeded, "paid: a 2xx, from the server, its status endpoint or the search")
	row("failed permanently", s.Failed, "4xx validation errors fail at once, never retried")
	if s.NotExecuted > 0 {
		row("not executed (pending)", s.NotExecuted, "the API never executed them: resent with the same key later")
	}
	if s.Pending > 0 {
		row("still pending", s.Pending, "no final state, may have executed: lost, or needs reconciliation (below)")
	}
	executed := "one charge per reference in the server's ledger"
	if s.Canceled > 0 {
		executed = "one charge per reference in the server's ledger, net of cancels"
	}
	if s.Mode == "target" {
		executed = "one charge per reference (search), else one completed key"
	}
	row("executed exactly once", s.ExecutedOnce, executed)
	row("duplicates", s.Duplicates, "references charged more than once, whatever the keys: must be 0")
	row("lost", s.Lost, "must be 0")
	if s.ServerRequests != nil {
		row("acknowledged", s.Acknowledged, fmt.Sprintf("payments a sender got an id for; %d not charged once under it", s.AckWrong))
	}
	row("stored_errors", s.StoredErrors, "keys the server stored a 5xx for: effect unknown, not resent")
	if s.Dialect == "" {
		row("reconciled_by_lookup", s.ReconciledByLookup, "of those, settled by the search by reference (-lookup)")
		row("needs_reconciliation", s.NeedsReconciliation, "payments a stored 5xx left unsettled: never paid again blindly")
		row("new intents", s.NewIntents, "new keys, only after the search found no charge")
	} else {
		row("reconciled_by_lookup", s.ReconciledByLookup, "of those, settled by the profile's search or cancel by reference")
		row("needs_reconciliation", s.NeedsReconciliation, "payments left manual (no route could tell): a person decides, never paid again blindly")
		row("new intents", s.NewIntents, "new keys, only after a key was settled as not executed")
		if s.Canceled > 0 {
			row("canceled", s.Canceled, "charges the cancel by reference undid; every count above is net of them")
		}
	}
	serverNote := func(what string, v *int) string {
		if v == nil {
			return ""
		}
		return fmt.Sprintf("server saw %d %s", *v, what)
	}
	attempts := "requests idem started, refused connections included"
	if s.ServerRequests != nil {
		attempts = "requests idem started; " + serverNote("POSTs", s.ServerRequests)
	}
	row("attempts", s.Attempts, attempts)
	row("retries", s.Retries, "resends scheduled, same key and same body")
	statusChecks := "status GETs idem sent before deciding to resend"
	if s.ServerKeyStatusChecks != nil {
		statusChecks = serverNote("status GETs", s.ServerKeyStatusChecks)
	}
	row("status checks", s.KeyStatusChecks, statusChecks)
	row("replays", s.Replays, "answers marked Idempotent-Replayed")
	row("throttled waits", s.ThrottledWaits, "waits honouring Retry-After")
	row("unknown resolved", s.UnknownResolved,
		fmt.Sprintf("by the status endpoint, of %d unknown (timeout, reset, 5xx)", s.UnknownOutcomes))
	row("calls that gave up", s.FinalFailures, "ended without a result, any reason; pending keys go again")
	row("orphans_reclaimed", s.OrphansReclaimed, "pending records without a live lease (dead or finished sender) taken over")
	row("claims_lost", s.ClaimsLost, "stale owners whose fenced write was refused: stopped, never resent")
	if s.Instances > 1 {
		row("lease waits", s.LeaseWaits, "calls that waited for another sender's live lease on the key")
	}
	crashes := fmt.Sprintf("SIGKILLs mid-run; %d child processes", s.Children)
	if s.Crashes != s.CrashesRequested {
		crashes = fmt.Sprintf("SIGKILLs mid-run, of %d requested; %d child processes", s.CrashesRequested, s.Children)
	}
	row("crashes", s.Crashes, crashes)
	row("records recovered", s.Recovered, fmt.Sprintf("of %d pending found by Recover (restarts, then at the end)", s.PendingFound))
	row("latency p50/p99 ms", fmt.Sprintf("%.1f/%.1f", s.P50, s.P99),
		fmt.Sprintf("over %d calls timed in a child", s.Calls))
	fmt.Fprintln(w)
	if s.serverStatsString != "" {
		fmt.Fprintln(w, wrap("server: "+s.serverStatsString, 100))
	}
	if s.Crashes > 0 && s.ServerRequests != nil {
		fmt.Fprintf(w, "client counters are each child's last report (after every call, and every %s):\n"+
			"a killed child's last attempts and calls may go unreported, and an attempt counted just\n"+
			"before a kill may never reach the server, so the server's counts, and the client's rows\n"+
			"among themselves (calls that gave up against failures and new intents), may differ by a\n"+
			"few either way; a payment cut short by a kill is sent again with its key by Recover,\n"+
			"an invalid one included.\n", statsEvery)
	}
	for _, d := range s.DuplicateDetails {
		fmt.Fprintf(w, "DUPLICATE %s\n", d)
	}
	for _, l := range s.LostDetails {
		fmt.Fprintf(w, "LOST %s\n", l)
	}
	for _, l := range s.AckWrongDetails {
		fmt.Fprintf(w, "ACKNOWLEDGED WRONG %s\n", l)
	}
	for _, l := range s.NeedsReconciliationDetails {
		fmt.Fprintf(w, "NEEDS RECONCILIATION %s\n", l)
	}
	fmt.Fprintln(w, s.verdict())
	fmt.Fprintf(w, "wall time %.1fs\n", float64(s.WallMS)/1000)
	return nil
}

// verdict is the table's closing line: whether exactly-once held, judged per reference.
func (s *summary) verdict() string {
	if s.Duplicates > 0 || s.Lost > 0 || s.AckWrong > 0 {
		return fmt.Sprintf("verdict: EXACTLY-ONCE VIOLATED: %d duplicates, %d lost, %d acknowledged wrong", s.Duplicates, s.Lost, s.AckWrong)
	}
	v := "verdict: exactly-once held: no reference charged twice, none lost"
	if s.NeedsReconciliation > 0 || s.NotExecuted > 0 {
		v += fmt.Sprintf("; unfinished: %d need reconciliation, %d not executed (see stderr)", s.NeedsReconciliation, s.NotExecuted)
	}
	return v
}

// wrap breaks text at spaces so that no line is longer than width (a longer word stays whole).
func wrap(text string, width int) string {
	var b strings.Builder
	n := 0
	for i, word := range strings.Fields(text) {
		if i > 0 && n+1+len(word) > width {
			b.WriteString("\n  ")
			n = 2
		} else if i > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}
