package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemkit/idem/idemadmin"
	"github.com/idemkit/idem/keystore"
)

// Human tables fit in 100 columns: long values are clipped with "…" (-json has them whole).

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeRecordJSON prints a record as keystore.Record's JSON, with its scope under "tenant",
// the word the -tenant flag and the admin handler's listing use.
func writeRecordJSON(w io.Writer, rec *keystore.Record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	if s, ok := m["scope"]; ok {
		m["tenant"] = s
		delete(m, "scope")
	}
	return writeJSON(w, m)
}

// clip shortens s to at most n runes, marking the cut with "…".
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// fitWidths gives each column the width of its widest value (want, in runes), narrowing the
// widest ones first until they fit in budget together: a short tenant leaves room for a long
// intent, and no column is cut while the table fits.
func fitWidths(budget int, want ...int) []int {
	w := slices.Clone(want)
	for sum(w) > budget {
		i := 0
		for j := range w {
			if w[j] > w[i] {
				i = j
			}
		}
		if w[i] <= 1 {
			break
		}
		w[i]--
	}
	return w
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// widest is the rune count of the longest of f over recs, at least that of header.
func widest[T any](recs []T, header string, f func(T) string) int {
	n := utf8.RuneCountInString(header)
	for _, r := range recs {
		n = max(n, utf8.RuneCountInString(f(r)))
	}
	return n
}

// writeTable prints ls within 100 columns: STATE, AGE, LAST and KEY (up to 36 runes, a UUID
// whole) as wide as their values, and the rest shared by TENANT, INTENT and REASON through
// fitWidths.
func writeTable(w io.Writer, recs []idemadmin.Record) error {
	scope := func(r idemadmin.Record) string { return dash(r.Scope) }
	intent := func(r idemadmin.Record) string { return dash(r.Intent) }
	reason := func(r idemadmin.Record) string { return dash(r.Reason) }
	fixed := widest(recs, "STATE", func(r idemadmin.Record) string { return string(r.State) }) +
		widest(recs, "AGE", func(r idemadmin.Record) string { return age(time.Duration(r.AgeSeconds) * time.Second) }) +
		len("LAST") + min(36, widest(recs, "KEY", func(r idemadmin.Record) string { return r.Key })) + 6
	cols := fitWidths(100-fixed, widest(recs, "TENANT", scope), widest(recs, "INTENT", intent), widest(recs, "REASON", reason))
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintln(tw, "STATE\tAGE\tLAST\tTENANT\tINTENT\tKEY\tREASON")
	for _, r := range recs {
		last := "-"
		if r.LastStatusCode != 0 {
			last = fmt.Sprint(r.LastStatusCode)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.State, age(time.Duration(r.AgeSeconds)*time.Second), last,
			clip(scope(r), cols[0]), clip(intent(r), cols[1]), clip(r.Key, 36), clip(reason(r), cols[2]))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d record(s)\n", len(recs))
	return err
}

// age formats d in at most 6 characters: 45s, 12m30s, 2h05m, 30h, 4d.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 10*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	case d < 72*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	default:
		return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
}

// writeRecord prints show and resolve: a label column of 14 and values clipped to 84 runes,
// but for the bodies, printed whole (bodyText, wrapped at 84 runes): they are the evidence
// an operator settles a record on.
// The lease is printed only on a pending record while it is held at now: an expired one
// claims nothing, and a finished record's only lapses.
func writeRecord(w io.Writer, r *keystore.Record, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any) {
		fmt.Fprintf(tw, "%s\t%s\n", k, clip(strings.ReplaceAll(fmt.Sprint(v), "\n", " "), 84))
	}
	row("key", r.Key)
	row("tenant", dash(r.Scope))
	row("intent", dash(r.Intent))
	row("state", r.State)
	row("request", r.Request.Method+" "+r.Request.URL)
	for _, name := range slices.Sorted(maps.Keys(r.Request.Header)) {
		for _, v := range r.Request.Header[name] {
			row("  header", name+": "+v)
		}
	}
	whole := func(k string, b []byte) { // wrapped at 84 runes, continued under the label
		r := []rune(bodyText(b))
		for len(r) > 84 {
			fmt.Fprintf(tw, "%s\t%s\n", k, string(r[:84]))
			k, r = "", r[84:]
		}
		fmt.Fprintf(tw, "%s\t%s\n", k, string(r))
	}
	whole("  body", r.Request.Body)
	row("fingerprint", r.Fingerprint)
	if r.Attempts == 0 && r.State == keystore.StatePending {
		// An attempt is counted when it ends: a process killed during the first one leaves 0.
		row("attempts", "0 (an attempt a crash cut short is not counted: it may have reached the server)")
	} else {
		row("attempts", r.Attempts)
	}
	if resolved(r) {
		row("last status", fmt.Sprintf("%d (before the resolution)", r.LastStatusCode))
	} else {
		row("last status", r.LastStatusCode)
	}
	row("reason", dash(r.Reason))
	if resolved(r) {
		// The error is what the record said before the resolution (such as "execution
		// began, effect unknown"): history, no longer the record's state.
		row("resolution", dash(r.Note))
		if r.Error != "" {
			row("before it", r.Error)
		}
	} else {
		row("error", dash(r.Error))
		row("note", dash(r.Note))
	}
	if r.NotExecuted { // internal: recovery may resend without asking the status endpoint
		row("last call", "knew nothing was executed")
	}
	row("created", r.CreatedAt.UTC().Format(time.RFC3339Nano))
	row("updated", r.UpdatedAt.UTC().Format(time.RFC3339Nano))
	if r.State == keystore.StatePending && r.Live(now) { // a finished record's lapses unused
		row("lease", fmt.Sprintf("%s until %s, fence %d", r.Owner, r.LeaseUntil.UTC().Format(time.RFC3339), r.Fence))
	}
	if r.Response != nil {
		row("response", r.Response.StatusCode)
		whole("  body", r.Response.Body)
	}
	return tw.Flush()
}

// resolved reports whether r was settled by a verdict (idemctl resolve, Client.Resolve or
// Config.Lookup).
func resolved(r *keystore.Record) bool {
	return r.Reason == keystore.ReasonExecuted || r.Reason == keystore.ReasonNotExecuted
}

// oldest is the age of the oldest record of a state, "-" when there is none (nil).
func oldest(seconds *int64) string {
	if seconds == nil {
		return "-"
	}
	return age(time.Duration(*seconds) * time.Second)
}

func writeStats(w io.Writer, s statsOut) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, st := range []keystore.State{keystore.StatePending, keystore.StateManual, keystore.StateSucceeded, keystore.StateFailed} {
		fmt.Fprintf(tw, "%s\t%d\n", st, s.Records.ByState[st])
	}
	fmt.Fprintf(tw, "total\t%d\n", s.Records.Total)
	fmt.Fprintf(tw, "tenants\t%d\n", s.Records.Tenants)
	fmt.Fprintf(tw, "oldest pending\t%s\n", oldest(s.Records.OldestPendingSeconds))
	fmt.Fprintf(tw, "oldest manual\t%s\n", oldest(s.Records.OldestManualSeconds))
	if s.Records.Damaged > 0 {
		fmt.Fprintf(tw, "damaged (skipped)\t%d\n", s.Records.Damaged)
	}
	if s.IndexProblems > 0 {
		fmt.Fprintf(tw, "intent index problems\t%d (idemctl verify names them)\n", s.IndexProblems)
	}
	if len(s.Client) > 0 {
		fmt.Fprintf(tw, "client counters (since the service started):\t\n")
		for _, k := range slices.Sorted(maps.Keys(s.Client)) {
			fmt.Fprintf(tw, "  %s\t%d\n", k, s.Client[k])
		}
	}
	return tw.Flush()
}

var reportOrder = []string{"pending", "skipped", "succeeded", "failed", "manual", "unknown", "purged", "resolved"}

// writeRecover prints the report on one line, then one row per record Recover worked on,
// within 100 columns: STATE and KEY (up to 36 runes) as wide as their values, and the rest
// shared by TENANT and INTENT through fitWidths. The errors follow the table, each whole
// (wrapped at 100 columns, never clipped): the cause at their end is what an operator acts on.
func writeRecover(w io.Writer, out recoverOut) error {
	parts := make([]string, 0, len(reportOrder))
	for _, k := range reportOrder {
		parts = append(parts, fmt.Sprintf("%s %d", k, out.Report[k]))
	}
	if _, err := fmt.Fprintln(w, strings.Join(parts, ", ")); err != nil {
		return err
	}
	if len(out.Records) == 0 {
		return nil
	}
	scope := func(e recoveredEntry) string { return dash(e.Record.Scope) }
	intent := func(e recoveredEntry) string { return dash(e.Record.Intent) }
	fixed := widest(out.Records, "STATE", func(e recoveredEntry) string { return string(e.Record.State) }) +
		min(36, widest(out.Records, "KEY", func(e recoveredEntry) string { return e.Record.Key })) + 3
	cols := fitWidths(100-fixed, widest(out.Records, "TENANT", scope), widest(out.Records, "INTENT", intent))
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintln(tw, "STATE\tTENANT\tINTENT\tKEY")
	for _, e := range out.Records {
		r := e.Record
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.State, clip(scope(e), cols[0]), clip(intent(e), cols[1]), clip(r.Key, 36))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, e := range out.Records {
		if e.Error == "" {
			continue
		}
		for _, line := range wrap("error of "+e.Record.Key+": "+e.Error, 100, "  ") {
			if _, err := fmt.Fprintln(w, line); err != nil {
				return err
			}
		}
	}
	return nil
}

// wrap breaks s into lines of at most width runes, at spaces where it can (a word longer
// than a line is cut across lines, never dropped); lines after the first start with indent.
// Joined with spaces, the lines give back s's words.
func wrap(s string, width int, indent string) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		for {
			sep := " "
			if line == "" || line == indent {
				sep = ""
			}
			if utf8.RuneCountInString(line+sep+word) <= width {
				line += sep + word
				break
			}
			if line != "" && line != indent { // the word goes on the next line
				lines = append(lines, line)
				line = indent
				continue
			}
			r := []rune(word) // longer than a whole line: cut it
			room := width - utf8.RuneCountInString(line)
			lines = append(lines, line+string(r[:room]))
			line, word = indent, string(r[room:])
		}
	}
	if line != "" && line != indent {
		lines = append(lines, line)
	}
	return lines
}

// bodyText is a body on one line: UTF-8 text with its line breaks and tabs as spaces, quoted
// Go-style if it holds other control characters (a terminal would act on them), or its size
// if it is not UTF-8 (-json has the bytes, base64).
func bodyText(b []byte) string {
	switch {
	case len(b) == 0:
		return "-"
	case !utf8.Valid(b):
		return fmt.Sprintf("(%d bytes, not UTF-8 text: -json has them, base64)", len(b))
	}
	s := strings.NewReplacer("\r\n", " ", "\n", " ", "\t", " ").Replace(string(b))
	if strings.ContainsFunc(s, unicode.IsControl) {
		return strconv.Quote(string(b))
	}
	return s
}
