package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/idemkit/idem/keystore/boltstore"
)

// The integrity commands work on a bbolt keystore file (-db) only: they read or rewrite its
// buckets, which neither a Postgres keystore nor a service's admin handler exposes. Like
// purge and resolve on -db, they need the file itself: whoever may write the file may run
// them, and a running service's lock keeps them off it (stop it first).

// onlyFile refuses a target other than -db for the command name.
func onlyFile(name string, c *common) error {
	if c.db == "" {
		return usageError{fmt.Sprintf("%s works on a bbolt keystore file: give -db FILE (stop the service that holds it first)", name)}
	}
	return nil
}

// problemRow is one damaged entry as verify prints it.
type problemRow struct {
	Bucket string `json:"bucket"`
	Scope  string `json:"scope"`
	Key    string `json:"key,omitempty"`
	Intent string `json:"intent,omitempty"`
	Error  string `json:"error"`
}

// errProblems: verify found damage (exit status 1, after the report).
var errProblems = errors.New("the keystore has damaged entries")

// cmdVerify reads the whole file and checks every record and both intent indexes
// (boltstore.Store.Verify), read-only. Exit status 1 if anything is damaged.
func cmdVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	fs := newFlags("verify", stderr, &c)
	if _, err := parse(fs, &c, args, 0); err != nil {
		return err
	}
	if err := onlyFile("verify", &c); err != nil {
		return err
	}
	s, err := openBolt(&c, false)
	if err != nil {
		return err
	}
	defer s.Close()
	rep, err := s.Verify(ctx)
	if err != nil {
		return err
	}
	rows := make([]problemRow, 0, len(rep.Problems))
	for _, p := range rep.Problems {
		rows = append(rows, problemRow{Bucket: p.Bucket, Scope: p.Scope, Key: p.Key, Intent: p.Intent, Error: p.Err.Error()})
	}
	if c.json {
		if err := writeJSON(stdout, map[string]any{"records": rep.Records, "intents": rep.Intents,
			"quarantined": rep.Quarantined, "problems": rows}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "records %d, intents %d, quarantined %d, problems %d\n", rep.Records, rep.Intents, rep.Quarantined, len(rows))
		for _, r := range rows {
			fmt.Fprintf(stdout, "%s\ttenant %q\tkey %q\tintent %q\t%s\n", r.Bucket, r.Scope, r.Key, r.Intent, r.Error)
		}
	}
	if len(rows) > 0 {
		return fmt.Errorf("%w: %d problem(s); quarantine a damaged record (idemctl quarantine), then rebuild the intent index (idemctl rebuild-index)", errProblems, len(rows))
	}
	return nil
}

// cmdQuarantine sets a damaged record aside on the operator's word
// (boltstore.Store.Quarantine).
func cmdQuarantine(ctx context.Context, args []string, stdout, stderr io.Writer, now func() time.Time) error {
	var c common
	fs := newFlags("quarantine", stderr, &c)
	tenant := fs.String("tenant", "", "tenant scope of the key; without it, the only tenant that has it")
	outcome := fs.String("outcome", "", "what happened to the payment: executed or not-executed (required; check the provider first)")
	note := fs.String("note", "", "who decided, on what evidence; kept on the record (required)")
	rest, err := parse(fs, &c, args, 1)
	if err != nil {
		return err
	}
	key := first(rest)
	var executed bool
	switch strings.ReplaceAll(*outcome, "_", "-") {
	case "executed":
		executed = true
	case "not-executed":
	default:
		return usageError{fmt.Sprintf("-outcome %q: want executed or not-executed (the record's intent stays blocked until someone says which)", *outcome)}
	}
	switch {
	case key == "":
		return usageError{"quarantine takes the KEY of a damaged record (idemctl verify names them)"}
	case strings.TrimSpace(*note) == "":
		return usageError{"-note is required: who decided, and on what evidence"}
	}
	if err := onlyFile("quarantine", &c); err != nil {
		return err
	}
	s, err := openBolt(&c, true)
	if err != nil {
		return err
	}
	defer s.Close()
	if !flagSet(fs, "tenant") { // as show and resolve: keys are unique in practice
		if *tenant, err = findTenant(ctx, &storeBackend{s: s, now: now}, key, ""); err != nil {
			return err
		}
	}
	rec, err := s.Quarantine(ctx, *tenant, key, boltstore.Verdict{Executed: executed, Note: *note, Now: now()})
	if err != nil {
		return err
	}
	if c.json {
		return writeJSON(stdout, rec)
	}
	fmt.Fprintf(stdout, "quarantined key %q (kept in the keystore's quarantine); in its place:\n", key)
	return writeRecord(stdout, rec, now())
}

// cmdRebuildIndex rebuilds both intent indexes from the records
// (boltstore.Store.RebuildIntentIndex).
func cmdRebuildIndex(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	fs := newFlags("rebuild-index", stderr, &c)
	if _, err := parse(fs, &c, args, 0); err != nil {
		return err
	}
	if err := onlyFile("rebuild-index", &c); err != nil {
		return err
	}
	s, err := openBolt(&c, true)
	if err != nil {
		return err
	}
	defer s.Close()
	n, err := s.RebuildIntentIndex(ctx)
	if err != nil {
		return err
	}
	if c.json {
		return writeJSON(stdout, map[string]int{"intents": n})
	}
	_, err = fmt.Fprintf(stdout, "rebuilt the intent index: %d intent(s)\n", n)
	return err
}
