package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore"
)

// Human tables fit in 100 columns: long values are clipped with "…" (-json has them whole).

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
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

// writeTable prints ls: widest row 9+6+4+8+12+36+19 runes plus 6 one-space gaps = 100.
func writeTable(w io.Writer, recs []idem.AdminRecord) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintln(tw, "STATE\tAGE\tLAST\tTENANT\tINTENT\tKEY\tREASON")
	for _, r := range recs {
		last := "-"
		if r.LastStatus != 0 {
			last = fmt.Sprint(r.LastStatus)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.State, age(time.Duration(r.AgeSeconds)*time.Second), last,
			clip(dash(r.Scope), 8), clip(dash(r.Intent), 12), clip(r.Key, 36), clip(dash(r.Reason), 19))
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

// writeRecord prints show and resolve: a label column of 14 and values clipped to 84 runes.
func writeRecord(w io.Writer, r *keystore.Record) error {
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
	row("  body", string(r.Request.Body))
	row("fingerprint", r.Fingerprint)
	row("attempts", r.Attempts)
	row("last status", r.LastStatus)
	row("reason", dash(r.Reason))
	row("error", dash(r.Error))
	row("note", dash(r.Note))
	row("not executed", r.NotExecuted)
	row("created", r.CreatedAt.UTC().Format(time.RFC3339Nano))
	row("updated", r.UpdatedAt.UTC().Format(time.RFC3339Nano))
	if r.Owner != "" {
		row("lease", fmt.Sprintf("%s until %s, fence %d", r.Owner, r.LeaseUntil.UTC().Format(time.RFC3339), r.Fence))
	}
	if r.Response != nil {
		row("response", r.Response.Status)
		row("  body", string(r.Response.Body))
	}
	return tw.Flush()
}

func writeStats(w io.Writer, s statsOut) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, st := range []keystore.State{keystore.StatePending, keystore.StateManual, keystore.StateSucceeded, keystore.StateFailed} {
		fmt.Fprintf(tw, "%s\t%d\n", st, s.Records.ByState[st])
	}
	fmt.Fprintf(tw, "total\t%d\n", s.Records.Total)
	fmt.Fprintf(tw, "tenants\t%d\n", s.Records.Tenants)
	fmt.Fprintf(tw, "oldest pending\t%s\n", age(time.Duration(s.Records.OldestPendingSeconds)*time.Second))
	fmt.Fprintf(tw, "oldest manual\t%s\n", age(time.Duration(s.Records.OldestManualSeconds)*time.Second))
	if len(s.Client) > 0 {
		fmt.Fprintf(tw, "client counters (since the service started):\t\n")
		for _, k := range slices.Sorted(maps.Keys(s.Client)) {
			fmt.Fprintf(tw, "  %s\t%d\n", k, s.Client[k])
		}
	}
	return tw.Flush()
}

var reportOrder = []string{"pending", "skipped", "succeeded", "failed", "manual", "unknown", "purged", "resolved"}

// writeRecover prints the report on one line, then one row per record Recover worked on:
// widest row 9+8+12+36+31 runes plus 4 one-space gaps = 100.
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
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintln(tw, "STATE\tTENANT\tINTENT\tKEY\tERROR")
	for _, e := range out.Records {
		r := e.Record
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.State, clip(dash(r.Scope), 8), clip(dash(r.Intent), 12),
			clip(r.Key, 36), clip(dash(e.Error), 31))
	}
	return tw.Flush()
}
