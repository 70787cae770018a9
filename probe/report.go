package probe

import (
	"fmt"
	"io"
	"strings"

	"github.com/idemkit/idem"
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
	CheckKeyStatusCompleted = "status-completed"
	CheckKeyStatusNotFound  = "status-not-found"
	CheckRetryAfter         = "retry-after"
	CheckExecutesOnce       = "executes-once"
)

// Checks lists every check in report order.
var Checks = []string{CheckCreate, CheckReplay, CheckReplayMarker, CheckKeyReuse, CheckInProgress,
	CheckKeyStatusCompleted, CheckKeyStatusNotFound, CheckRetryAfter, CheckExecutesOnce}

var rules = map[string]string{
	CheckCreate:             "a fresh key is executed (2xx)",
	CheckReplay:             "same key, same body: same status, byte-identical body",
	CheckReplayMarker:       "a replay carries Idempotent-Replayed: true",
	CheckKeyReuse:           "same key, other body: 422 naming key reuse",
	CheckInProgress:         "same key while in progress: 409 + Retry-After, or one execution",
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
	// Safe is false when a broken row makes retrying against this API unsafe.
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
		c.Classifiers = append(idem.Classifiers{idem.KeyConflictCodes(s.KeyConflictCodes...)}, idem.DefaultClassifiers()...)
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
// (evidence is wrapped), then the suggested client configuration. width < 60 means 100.
func (r *Report) WriteText(w io.Writer, width int) error {
	if width < 60 {
		width = 100
	}
	var b strings.Builder
	fmt.Fprintf(&b, "probe of %s (sandbox)\n\n", r.Target)
	const checkW, resultW = 17, 13
	fmt.Fprintf(&b, "%-*s %-*s %s\n", checkW, "CHECK", resultW, "RESULT", "EVIDENCE")
	evW := width - checkW - resultW - 2
	for _, row := range r.Rows {
		lines := wrap(row.Evidence, evW)
		for i, l := range lines {
			if i == 0 {
				fmt.Fprintf(&b, "%-*s %-*s %s\n", checkW, row.Check, resultW, row.Result, l)
			} else {
				fmt.Fprintf(&b, "%*s %s\n", checkW+resultW+1, "", l)
			}
		}
	}
	s := r.Suggestion
	b.WriteString("\nidem client configuration that fits:\n")
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
		fmt.Fprintf(&b, "  Lookup:    LookupByReference(%q, \"\")\n", s.LookupPath)
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
