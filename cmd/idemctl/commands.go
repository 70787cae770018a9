package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// errHelp: -h was given; the flag package printed the command's flags.
var errHelp = errors.New("help")

// common holds the flags every command takes.
type common struct {
	db      string
	json    bool
	timeout time.Duration
	url     string
	dsn     string
}

func newFlags(name string, stderr io.Writer, c *common) *flag.FlagSet {
	fs := flag.NewFlagSet("idemctl "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.db, "db", "", "keystore file (bbolt) `path`")
	fs.BoolVar(&c.json, "json", false, "print JSON instead of a table")
	fs.DurationVar(&c.timeout, "timeout", boltstore.DefaultTimeout, "longest wait for the file lock")
	fs.StringVar(&c.url, "url", "", "admin endpoint URL (not available yet)")
	fs.StringVar(&c.dsn, "dsn", "", "Postgres keystore DSN (not available yet)")
	return fs
}

// parse parses args and checks the common flags; positional arguments are returned.
func parse(fs *flag.FlagSet, c *common, args []string, maxArgs int) ([]string, error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		return nil, usageError{err.Error()}
	}
	switch {
	case c.url != "":
		return nil, usageError{"-url is not available yet: the admin endpoint comes with idem's admin handler"}
	case c.dsn != "":
		return nil, usageError{"-dsn is not available yet: Postgres keystores come with keystore/pgstore"}
	case c.db == "":
		return nil, usageError{"-db FILE is required"}
	case fs.NArg() > maxArgs:
		return nil, usageError{fmt.Sprintf("unexpected arguments: %s", strings.Join(fs.Args()[maxArgs:], " "))}
	case c.timeout <= 0:
		return nil, usageError{"-timeout must be positive"}
	}
	return fs.Args(), nil
}

// openStore opens the keystore, read-only unless write is set, with a message that says
// what to do when the service holds the file.
func openStore(c *common, write bool) (*boltstore.Store, error) {
	opts := &boltstore.Options{Timeout: c.timeout}
	var s *boltstore.Store
	var err error
	if write {
		s, err = boltstore.Open(c.db, opts)
	} else {
		s, err = boltstore.OpenReadOnly(c.db, opts)
	}
	if errors.Is(err, boltstore.ErrLocked) {
		return nil, fmt.Errorf("%s is in use by another process (a running service holds its lock); gave up after %s: stop the service, or use its admin endpoint: %w", c.db, c.timeout, err)
	}
	return s, err
}

func parseStates(s string) ([]keystore.State, error) {
	if s == "" {
		return nil, nil
	}
	var out []keystore.State
	for part := range strings.SplitSeq(s, ",") {
		st := keystore.State(strings.TrimSpace(part))
		if !st.Valid() {
			return nil, usageError{fmt.Sprintf("unknown state %q (pending, succeeded, failed, manual)", st)}
		}
		out = append(out, st)
	}
	return out, nil
}

func cmdLs(ctx context.Context, args []string, stdout, stderr io.Writer, now func() time.Time) error {
	var c common
	fs := newFlags("ls", stderr, &c)
	states := fs.String("state", "", "comma-separated `states` to list (pending, succeeded, failed, manual); all if empty")
	minAge := fs.Duration("min-age", 0, "list only records created at least this long ago")
	tenant := fs.String("tenant", "", "list only this tenant scope")
	allTenants := true
	if _, err := parse(fs, &c, args, 0); err != nil {
		return err
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "tenant" {
			allTenants = false
		}
	})
	sts, err := parseStates(*states)
	if err != nil {
		return err
	}
	if *minAge < 0 {
		return usageError{"-min-age must not be negative"}
	}
	s, err := openStore(&c, false)
	if err != nil {
		return err
	}
	defer s.Close()
	recs, err := s.List(ctx, sts...)
	if err != nil {
		return err
	}
	t := now()
	recs = slices.DeleteFunc(recs, func(r *keystore.Record) bool {
		return t.Sub(r.CreatedAt) < *minAge || (!allTenants && r.Scope != *tenant)
	})
	if c.json {
		return writeJSON(stdout, summaries(recs, t))
	}
	return writeTable(stdout, recs, t)
}

func cmdShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	fs := newFlags("show", stderr, &c)
	tenant := fs.String("tenant", "", "tenant scope of the key or intent")
	intent := fs.String("intent", "", "find the record by its `intent` instead of a key")
	rest, err := parse(fs, &c, args, 1)
	if err != nil {
		return err
	}
	if (len(rest) == 1) == (*intent != "") {
		return usageError{"show takes one KEY or -intent INTENT"}
	}
	s, err := openStore(&c, false)
	if err != nil {
		return err
	}
	defer s.Close()
	var rec *keystore.Record
	if *intent != "" {
		rec, err = s.GetByIntent(ctx, *tenant, *intent)
	} else {
		rec, err = s.Get(ctx, *tenant, rest[0])
	}
	if errors.Is(err, keystore.ErrNotFound) {
		return fmt.Errorf("no record for %s in tenant %q", describe(rest, *intent), *tenant)
	}
	if err != nil {
		return err
	}
	if c.json {
		return writeJSON(stdout, rec)
	}
	return writeRecord(stdout, rec)
}

func describe(keys []string, intent string) string {
	if intent != "" {
		return fmt.Sprintf("intent %q", intent)
	}
	return fmt.Sprintf("key %q", keys[0])
}

func cmdStats(ctx context.Context, args []string, stdout, stderr io.Writer, now func() time.Time) error {
	var c common
	fs := newFlags("stats", stderr, &c)
	if _, err := parse(fs, &c, args, 0); err != nil {
		return err
	}
	s, err := openStore(&c, false)
	if err != nil {
		return err
	}
	defer s.Close()
	recs, err := s.List(ctx)
	if err != nil {
		return err
	}
	st := computeStats(recs, now())
	if c.json {
		return writeJSON(stdout, st)
	}
	return writeStats(stdout, st)
}

func cmdPurge(ctx context.Context, args []string, stdout, stderr io.Writer, now func() time.Time) error {
	var c common
	fs := newFlags("purge", stderr, &c)
	olderThan := fs.Duration("older-than", 0, "delete succeeded and failed records last updated at least this long ago (required)")
	dryRun := fs.Bool("dry-run", false, "count what would be deleted, read-only")
	if _, err := parse(fs, &c, args, 0); err != nil {
		return err
	}
	if *olderThan <= 0 {
		return usageError{"-older-than DURATION (positive) is required, e.g. -older-than 72h"}
	}
	cutoff := now().Add(-*olderThan)
	s, err := openStore(&c, !*dryRun)
	if err != nil {
		return err
	}
	defer s.Close()
	var n int
	if *dryRun {
		recs, err := s.List(ctx, keystore.StateSucceeded, keystore.StateFailed)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if r.UpdatedAt.Before(cutoff) {
				n++
			}
		}
	} else if n, err = s.Purge(ctx, cutoff); err != nil {
		return err
	}
	if c.json {
		return writeJSON(stdout, map[string]any{"purged": n, "dry_run": *dryRun, "cutoff": cutoff.UTC()})
	}
	verb := "purged"
	if *dryRun {
		verb = "would purge"
	}
	_, err = fmt.Fprintf(stdout, "%s %d succeeded/failed record(s) last updated before %s\n", verb, n, cutoff.UTC().Format(time.RFC3339))
	return err
}
