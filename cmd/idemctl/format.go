package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem/keystore"
)

// summary is one row of ls -json: the record without its bodies.
type summary struct {
	Scope      string         `json:"scope"`
	Key        string         `json:"key"`
	Intent     string         `json:"intent,omitempty"`
	State      keystore.State `json:"state"`
	Method     string         `json:"method"`
	URL        string         `json:"url"`
	Attempts   int            `json:"attempts"`
	LastStatus int            `json:"last_status,omitempty"`
	Reason     string         `json:"reason,omitempty"`
	Error      string         `json:"error,omitempty"`
	AgeSeconds int64          `json:"age_seconds"`
	CreatedAt  time.Time      `json:"created_at"`
	UpdatedAt  time.Time      `json:"updated_at"`
}

func summaries(recs []*keystore.Record, now time.Time) []summary {
	out := make([]summary, 0, len(recs))
	for _, r := range recs {
		out = append(out, summary{Scope: r.Scope, Key: r.Key, Intent: r.Intent, State: r.State,
			Method: r.Request.Method, URL: r.Request.URL, Attempts: r.Attempts, LastStatus: r.LastStatus,
			Reason: r.Reason, Error: r.Error, AgeSeconds: int64(now.Sub(r.CreatedAt) / time.Second),
			CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt})
	}
	return out
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func writeTable(w io.Writer, recs []*keystore.Record, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STATE\tAGE\tATTEMPTS\tLAST\tTENANT\tINTENT\tKEY\tREASON")
	for _, r := range recs {
		last := "-"
		if r.LastStatus != 0 {
			last = fmt.Sprint(r.LastStatus)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.State, age(now.Sub(r.CreatedAt)), r.Attempts, last,
			dash(r.Scope), dash(r.Intent), r.Key, dash(r.Reason))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d record(s)\n", len(recs))
	return err
}

// age formats d to the second, or in whole minutes/hours/days once it is long.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Hour:
		return d.Truncate(time.Second).String()
	case d < 48*time.Hour:
		return d.Truncate(time.Minute).String()
	default:
		return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func writeRecord(w io.Writer, r *keystore.Record) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
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
	row("not executed", r.NotExecuted)
	row("created", r.CreatedAt.UTC().Format(time.RFC3339Nano))
	row("updated", r.UpdatedAt.UTC().Format(time.RFC3339Nano))
	if r.Response != nil {
		row("response", r.Response.Status)
		row("  body", string(r.Response.Body))
	}
	return tw.Flush()
}

// stats is what the stats command reports.
type stats struct {
	Total                int                    `json:"total"`
	ByState              map[keystore.State]int `json:"by_state"`
	OldestPendingSeconds int64                  `json:"oldest_pending_seconds"`
	OldestManualSeconds  int64                  `json:"oldest_manual_seconds"`
	Tenants              int                    `json:"tenants"`
}

func computeStats(recs []*keystore.Record, now time.Time) stats {
	s := stats{Total: len(recs), ByState: map[keystore.State]int{
		keystore.StatePending: 0, keystore.StateSucceeded: 0, keystore.StateFailed: 0, keystore.StateManual: 0}}
	tenants := map[string]bool{}
	for _, r := range recs {
		s.ByState[r.State]++
		tenants[r.Scope] = true
		a := int64(now.Sub(r.CreatedAt) / time.Second)
		switch r.State {
		case keystore.StatePending:
			s.OldestPendingSeconds = max(s.OldestPendingSeconds, a)
		case keystore.StateManual:
			s.OldestManualSeconds = max(s.OldestManualSeconds, a)
		}
	}
	s.Tenants = len(tenants)
	return s
}

func writeStats(w io.Writer, s stats) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, st := range []keystore.State{keystore.StatePending, keystore.StateManual, keystore.StateSucceeded, keystore.StateFailed} {
		fmt.Fprintf(tw, "%s\t%d\n", st, s.ByState[st])
	}
	fmt.Fprintf(tw, "total\t%d\n", s.Total)
	fmt.Fprintf(tw, "tenants\t%d\n", s.Tenants)
	fmt.Fprintf(tw, "oldest pending\t%s\n", age(time.Duration(s.OldestPendingSeconds)*time.Second))
	fmt.Fprintf(tw, "oldest manual\t%s\n", age(time.Duration(s.OldestManualSeconds)*time.Second))
	return tw.Flush()
}
