package probe

import (
	"fmt"
	"io"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/outcome"
)

// Result is a check's verdict.
type Result string

// The verdicts of a Row.
const (
	// Honoured: the API behaved as the contract says.
	Honoured Result = "honoured"
	// Broken: the API answered against the contract; Evidence says how.
	Broken Result = "broken"
	// NotObserved: the probe could not tell (no such endpoint, no overlap, no throttling).
	NotObserved Result = "not observed"
)

// The checks, in the order Run reports them (see the package documentation).
const (
	CheckCreate             = "create"
	CheckReplay             = "replay"
	CheckReplayMarker       = "replay-marker"
	CheckKeyReuse           = "key-reuse"
	CheckInProgress         = "in-progress"
	CheckLostResponse       = "lost-response"
	CheckStored5xx          = "stored-5xx"
	CheckRetention          = "retention"
	CheckKeyStatusCompleted = "status-completed"
	CheckKeyStatusNotFound  = "status-not-found"
	CheckRetryAfter         = "retry-after"
	CheckExecutesOnce       = "executes-once"
)

// Checks lists every check in report order.
var Checks = []string{CheckCreate, CheckReplay, CheckReplayMarker, CheckKeyReuse, CheckInProgress,
	CheckLostResponse, CheckStored5xx, CheckRetention, CheckKeyStatusCompleted, CheckKeyStatusNotFound,
	CheckRetryAfter, CheckExecutesOnce}

// SafetyChecks are the rows a retrying client's exactly-once rests on: the verdict is
// VerdictSafe only when every one of them was observed Honoured. A Broken row among them, or
// a Broken retention row, makes it VerdictUnsafe.
var SafetyChecks = []string{CheckReplay, CheckKeyReuse, CheckInProgress, CheckLostResponse, CheckStored5xx, CheckExecutesOnce}

var rules = map[string]string{
	CheckCreate:             "a fresh key is executed (2xx)",
	CheckReplay:             "same key, same body: same status, byte-identical body",
	CheckReplayMarker:       "a replay carries Idempotent-Replayed: true",
	CheckKeyReuse:           "same key, other body: 422 naming key reuse",
	CheckInProgress:         "same key while in progress: 409 + Retry-After, or one execution",
	CheckLostResponse:       "answer lost after the request was sent: the resend charges nothing more",
	CheckStored5xx:          "a 5xx is the key's answer: a resend replays it or completes the one charge",
	CheckRetention:          "a key resent inside the advertised retention is replayed, not executed",
	CheckKeyStatusCompleted: "status endpoint: completed with the stored status",
	CheckKeyStatusNotFound:  "status endpoint: 404 not_found for an unknown key",
	CheckRetryAfter:         "Retry-After is delay-seconds or an HTTP-date",
	CheckExecutesOnce:       "each reference executed once, whatever the retries",
}

// Row is one check's outcome.
type Row struct {
	Check    string `json:"check"`    // one of Checks
	Rule     string `json:"rule"`     // what the contract asks, in one line
	Result   Result `json:"result"`   // Honoured, Broken or NotObserved
	Evidence string `json:"evidence"` // what the API answered
	// Trials is how many payments (fresh keys) or requests the row's verdict rests on; 0
	// when it rests on none (a row not observed for want of an endpoint).
	Trials int `json:"trials"`
}

// Suggestion is the idem client configuration that fits the probed API, as data (JSON) and
// through Config.
type Suggestion struct {
	BaseURL   string `json:"base_url"`   // Config.BaseURL: the probed URL without a trailing slash
	KeyHeader string `json:"key_header"` // Config.KeyHeader: the header the probe sent the key in
	// KeyStatusURL is the status endpoint with "{key}", "" when the API has none (idem then
	// resends an unknown outcome with the same key, safe only within KeyTTL).
	KeyStatusURL string `json:"status_url"`
	// KeyConflictCodes are the codes of the API's key-reuse 422 that idem.IsKeyReuse does
	// not recognise by itself: pass them to idem.KeyConflictCodes.
	KeyConflictCodes []string `json:"key_conflict_codes,omitempty"`
	// LookupPath is the search by reference for idem.LookupByReference, "" when none.
	LookupPath string `json:"lookup_path,omitempty"`
	// Profile is the name of the profile (profile.ByName) whose dialect the API speaks, as
	// detected; "" when none fits. See Report.Dialect for the evidence.
	Profile string `json:"profile,omitempty"`
	// Safe is true only when the report's Verdict is VerdictSafe.
	Safe bool `json:"safe"`
	// Notes are advice in sentences: what the probe could not see (KeyTTL), a missing status
	// endpoint or replay marker, and why the API is unsafe when Safe is false.
	Notes []string `json:"notes"`
}

// Config returns the idem.Config of s: BaseURL, KeyHeader, KeyStatusURL, the classifiers (with
// idem.KeyConflictCodes prepended when needed) and Lookup. The caller adds its Store,
// Policy and credentials. Errors are idem.LookupByReference's.
func (s Suggestion) Config() (idem.Config, error) {
	c := idem.Config{BaseURL: s.BaseURL, KeyHeader: s.KeyHeader, KeyStatusURL: s.KeyStatusURL}
	if len(s.KeyConflictCodes) > 0 {
		c.Classifiers = append(outcome.Classifiers{outcome.KeyConflictCodes(s.KeyConflictCodes...)}, outcome.DefaultClassifiers()...)
	}
	if s.LookupPath != "" {
		l, err := idem.LookupByReference(s.LookupPath, "")
		if err != nil {
			return idem.Config{}, err
		}
		c.Lookup = l
	}
	return c, nil
}

// Report is what Run found.
type Report struct {
	Target     string     `json:"target"`     // the probed POST endpoint: BaseURL and Path
	Rows       []Row      `json:"rows"`       // one per check, in the order of Checks
	Suggestion Suggestion `json:"suggestion"` // the idem client configuration that fits the API
	// Verdict is VerdictSafe only when every row of SafetyChecks was observed Honoured.
	Verdict Verdict `json:"verdict"`
	// Power is how likely the trials were to catch an API charging twice now and then.
	Power Power `json:"power"`
	// Charges counts the real operations the probe made.
	Charges Charges `json:"charges"`
	// Dialect is the dialect of docs/DIALECTS.md the API's answers fit best.
	Dialect Dialect `json:"dialect"`
	// Unauthorized is true when the API refused the probe's credentials (401 or 403) on the
	// create or the status endpoint: the rows then say little, and idemctl probe exits 1.
	Unauthorized bool `json:"unauthorized,omitempty"`
}

// Row returns the row of check and true, or false when the report has none.
func (r *Report) Row(check string) (Row, bool) {
	for _, row := range r.Rows {
		if row.Check == check {
			return row, true
		}
	}
	return Row{}, false
}

// Broken returns the checks whose result is Broken, in report order.
func (r *Report) Broken() []string {
	var out []string
	for _, row := range r.Rows {
		if row.Result == Broken {
			out = append(out, row.Check)
		}
	}
	return out
}

// WriteText writes the report as a table for a terminal, each line at most width columns
// (evidence is wrapped): the rows with the trials each rests on, then the verdict, the
// power of the trials, the real charges made, the dialect detected and the suggested client
// configuration. width < 60 means 100.
func (r *Report) WriteText(w io.Writer, width int) error {
	if width < 60 {
		width = 100
	}
	var b strings.Builder
	fmt.Fprintf(&b, "probe of %s (sandbox)\n\n", r.Target)
	const checkW, resultW, trialsW = 17, 13, 6
	fmt.Fprintf(&b, "%-*s %-*s %*s %s\n", checkW, "CHECK", resultW, "RESULT", trialsW, "TRIALS", "EVIDENCE")
	evW := width - checkW - resultW - trialsW - 3
	for _, row := range r.Rows {
		for i, l := range wrap(row.Evidence, evW) {
			if i == 0 {
				fmt.Fprintf(&b, "%-*s %-*s %*d %s\n", checkW, row.Check, resultW, row.Result, trialsW, row.Trials, l)
			} else {
				fmt.Fprintf(&b, "%*s %s\n", checkW+resultW+trialsW+2, "", l)
			}
		}
	}
	b.WriteString("\n")
	para := func(label, text string) {
		for i, l := range wrap(label+" "+text, width-2) {
			if i == 0 {
				fmt.Fprintf(&b, "%s\n", l)
			} else {
				fmt.Fprintf(&b, "  %s\n", l)
			}
		}
	}
	para("verdict:", verdictText(r))
	para("power:", r.Power.String())
	para("real charges:", r.Charges.String())
	para("dialect:", r.Dialect.String())
	s := r.Suggestion
	b.WriteString("\nidem client configuration that fits:\n")
	if s.Profile != "" {
		fmt.Fprintf(&b, "  Profile:   profile.ByName(%q)\n", s.Profile)
	}
	fmt.Fprintf(&b, "  BaseURL:   %s\n  KeyHeader: %s\n", s.BaseURL, s.KeyHeader)
	if s.KeyStatusURL != "" {
		fmt.Fprintf(&b, "  KeyStatusURL: %s\n", s.KeyStatusURL)
	} else {
		b.WriteString("  KeyStatusURL: (none)\n")
	}
	if len(s.KeyConflictCodes) > 0 {
		fmt.Fprintf(&b, "  Classifiers: KeyConflictCodes(%q) before DefaultClassifiers()\n", s.KeyConflictCodes)
	}
	if s.LookupPath != "" {
		// The Go statement on a line of its own: with a long search path it would pass the
		// width after the label.
		fmt.Fprintf(&b, "  Lookup:    Config.Lookup from\n    lookup, err := idem.LookupByReference(%q, \"\")\n", s.LookupPath)
	}
	for _, n := range s.Notes {
		for i, l := range wrap(n, width-4) {
			if i == 0 {
				fmt.Fprintf(&b, "  - %s\n", l)
			} else {
				fmt.Fprintf(&b, "    %s\n", l)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// verdictText is the verdict with the rows it rests on.
func verdictText(r *Report) string {
	switch r.Verdict {
	case VerdictUnsafe:
		return fmt.Sprintf("UNSAFE (broken: %s)", strings.Join(r.Broken(), ", "))
	case VerdictNotProven:
		return fmt.Sprintf("NOT PROVEN SAFE (safety rows not observed: %s)", strings.Join(r.unobservedSafety(), ", "))
	case VerdictSafe:
		return "safe (every safety row observed honoured)"
	}
	return string(r.Verdict)
}

// unobservedSafety returns the rows of SafetyChecks that are not Honoured nor Broken.
func (r *Report) unobservedSafety() []string {
	var out []string
	for _, c := range SafetyChecks {
		if row, ok := r.Row(c); !ok || row.Result == NotObserved {
			out = append(out, c)
		}
	}
	return out
}

// verdictOf grades rows: unsafe on a broken safety or retention row, safe only when every
// safety row is Honoured, else not proven.
func verdictOf(rows map[string]Row) Verdict {
	for _, c := range append([]string{CheckRetention}, SafetyChecks...) {
		if rows[c].Result == Broken {
			return VerdictUnsafe
		}
	}
	for _, c := range SafetyChecks {
		if rows[c].Result != Honoured {
			return VerdictNotProven
		}
	}
	return VerdictSafe
}

// wrap splits s into lines of at most width bytes at spaces (a longer word is cut).
func wrap(s string, width int) []string {
	var lines []string
	var cur string
	for _, word := range strings.Fields(s) {
		for len(word) > width {
			if cur != "" {
				lines, cur = append(lines, cur), ""
			}
			lines, word = append(lines, word[:width]), word[width:]
		}
		switch {
		case cur == "":
			cur = word
		case len(cur)+1+len(word) <= width:
			cur += " " + word
		default:
			lines, cur = append(lines, cur), word
		}
	}
	if cur != "" || len(lines) == 0 {
		lines = append(lines, cur)
	}
	return lines
}
