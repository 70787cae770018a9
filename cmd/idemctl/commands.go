package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemadmin"
	"github.com/idemkit/idem/keystore"
)

func cmdLs(ctx context.Context, args []string, stdout, stderr io.Writer, now func() time.Time) error {
	var c common
	fs := newFlags("ls", stderr, &c)
	states := fs.String("state", "", "comma-separated `states` to list (pending, succeeded, failed, manual); all if empty")
	minAge := fs.Duration("min-age", 0, "list only records created at least this long ago")
	tenant := fs.String("tenant", "", "list only this tenant scope")
	limit := fs.Int("limit", defaultLsLimit, "list at most this many records, the oldest first; 0 lists every one")
	if _, err := parse(fs, &c, args, 0); err != nil {
		return err
	}
	if *limit < 0 {
		return usageError{"-limit must not be negative (0 lists every record)"}
	}
	f := listFilter{minAge: *minAge}
	if *limit > 0 {
		f.limit = *limit + 1 // one more than shown: says whether records were left out
	}
	fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "tenant" {
			f.tenant = tenant
		}
	})
	var err error
	if f.states, err = parseStates(*states); err != nil {
		return err
	}
	if *minAge < 0 {
		return usageError{"-min-age must not be negative"}
	}
	b, err := open(ctx, &c, false, now)
	if err != nil {
		return err
	}
	defer b.close()
	recs, damaged, err := b.list(ctx, f)
	if err != nil {
		return err
	}
	for _, d := range damaged {
		fmt.Fprintf(stderr, "idemctl: skipped a record that cannot be decoded (tenant %q, key %q): %s\n", d.Scope, d.Key, d.Error)
	}
	if *limit > 0 && len(recs) > *limit {
		recs = recs[:*limit]
		// On stderr, so that -json stays an array of records.
		fmt.Fprintf(stderr, "idemctl: showing the oldest %d records; more match (-limit N, or -limit 0 for every one)\n", *limit)
	}
	if c.json {
		err = writeJSON(stdout, recs)
	} else {
		err = writeTable(stdout, recs)
	}
	if err != nil || len(damaged) == 0 {
		return err
	}
	// The listing stands (printed above), but it is not every record: exit 1, as recover
	// does, so that "0 record(s)" from a file read without its key ring is not taken as
	// empty.
	return fmt.Errorf("ls skipped %d record(s) that cannot be decoded (named above)%s", len(damaged), damagedHint(damaged, c.keyRingEnv))
}

// damagedHint says why records could not be decoded when their errors tell: a sealed file
// read without its key ring, or with another one; else what to do about damage.
func damagedHint(damaged []damagedRow, keyRingEnv string) string {
	unknown, wrong := false, false
	for _, d := range damaged {
		unknown = unknown || strings.Contains(d.Error, keystore.ErrKeyUnknown.Error())
		wrong = wrong || strings.Contains(d.Error, keystore.ErrKeyWrong.Error())
	}
	switch {
	case (unknown || wrong) && keyRingEnv == "":
		return ": their bodies are sealed; give the service's key ring with -keyring-env NAME"
	case unknown || wrong:
		return fmt.Sprintf(": their bodies are sealed with a key that the key ring of -keyring-env %s does not hold, or holds another key under its id; give the service's key ring", keyRingEnv)
	}
	return ": idemctl verify names the damage; quarantine such a record (idemctl quarantine)"
}

// defaultLsLimit is ls's default -limit: a screenful or two of the oldest records, which are
// the ones a person looks at first.
const defaultLsLimit = 100

func cmdShow(ctx context.Context, args []string, stdout, stderr io.Writer, now func() time.Time) error {
	var c common
	fs := newFlags("show", stderr, &c)
	tenant := fs.String("tenant", "", "tenant scope of the key or intent; without it, the only tenant that has it")
	intent := fs.String("intent", "", "find the record by its `intent` instead of a key")
	rest, err := parse(fs, &c, args, 1)
	if err != nil {
		return err
	}
	if (len(rest) == 1) == (*intent != "") {
		return usageError{"show takes one KEY or -intent INTENT"}
	}
	b, err := open(ctx, &c, false, now)
	if err != nil {
		return err
	}
	defer b.close()
	if !flagSet(fs, "tenant") {
		if *tenant, err = findTenant(ctx, b, first(rest), *intent); err != nil {
			return err
		}
	}
	rec, err := b.get(ctx, *tenant, first(rest), *intent)
	if err != nil {
		return err
	}
	if c.json {
		return writeRecordJSON(stdout, rec)
	}
	return writeRecord(stdout, rec, now())
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// findTenant is the tenant of the only record with key (or intent, when set), for show and
// resolve without -tenant: keys are unique in practice (UUIDs), so naming the tenant is
// needed only when the key is not. It fails with errNotFound when no tenant has the record,
// and names the tenants when more than one has it. A record that cannot be decoded counts by
// its key (its intent is unknown), so that get then reports its error.
func findTenant(ctx context.Context, b backend, key, intent string) (string, error) {
	recs, damaged, err := b.list(ctx, listFilter{})
	if err != nil {
		return "", err
	}
	var tenants []string
	for _, r := range recs {
		if (intent != "" && r.Intent == intent) || (intent == "" && r.Key == key) {
			tenants = append(tenants, r.Scope)
		}
	}
	for _, d := range damaged {
		if intent == "" && d.Key == key {
			tenants = append(tenants, d.Scope)
		}
	}
	slices.Sort(tenants)
	tenants = slices.Compact(tenants)
	switch len(tenants) {
	case 0:
		return "", fmt.Errorf("%w: no record for %s in any tenant", errNotFound, describe(key, intent))
	case 1:
		return tenants[0], nil
	}
	quoted := make([]string, len(tenants))
	for i, t := range tenants {
		quoted[i] = strconv.Quote(t)
	}
	return "", fmt.Errorf("%s is in %d tenants (%s): name one with -tenant", describe(key, intent), len(tenants), strings.Join(quoted, ", "))
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func cmdStats(ctx context.Context, args []string, stdout, stderr io.Writer, now func() time.Time) error {
	var c common
	fs := newFlags("stats", stderr, &c)
	if _, err := parse(fs, &c, args, 0); err != nil {
		return err
	}
	b, err := open(ctx, &c, false, now)
	if err != nil {
		return err
	}
	defer b.close()
	st, err := b.stats(ctx)
	if err != nil {
		return err
	}
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
	keyTTL := fs.Duration("key-ttl", idem.DefaultKeyTTL, "the service's Config.KeyTTL: -older-than may not be shorter")
	if _, err := parse(fs, &c, args, 0); err != nil {
		return err
	}
	if *olderThan <= 0 {
		return usageError{"-older-than DURATION (positive) is required, e.g. -older-than 72h"}
	}
	// NewClient's own rule for Retention: purged sooner, a repeated intent mints a new key
	// (a second charge) where the old one would still have been replayed by the server.
	if *keyTTL <= 0 {
		return usageError{fmt.Sprintf("-key-ttl %s: want the service's Config.KeyTTL, a positive duration (idem's default %s)", *keyTTL, idem.DefaultKeyTTL)}
	}
	if *olderThan < *keyTTL {
		return usageError{fmt.Sprintf("-older-than %s is shorter than -key-ttl %s: a later Do of a purged record's intent would get a new key and could be charged again; purge only records older than the service's KeyTTL", *olderThan, *keyTTL)}
	}
	cutoff := now().Add(-*olderThan)
	b, err := open(ctx, &c, !*dryRun, now)
	if err != nil {
		return err
	}
	defer b.close()
	n, damaged, err := b.purge(ctx, cutoff, *dryRun)
	if err != nil {
		return err
	}
	for _, d := range damaged {
		fmt.Fprintf(stderr, "idemctl: skipped a record that cannot be decoded (tenant %q, key %q): %s\n", d.Scope, d.Key, d.Error)
	}
	if c.json {
		if damaged == nil {
			damaged = []damagedRow{}
		}
		return writeJSON(stdout, map[string]any{"purged": n, "dry_run": *dryRun, "cutoff": cutoff.UTC(), "damaged": damaged})
	}
	verb := "purged"
	if *dryRun {
		verb = "would purge"
	}
	_, err = fmt.Fprintf(stdout, "%s %d succeeded/failed record(s) last updated before %s\n", verb, n, cutoff.UTC().Format(time.RFC3339))
	return err
}

func cmdResolve(ctx context.Context, args []string, stdout, stderr io.Writer, now func() time.Time) error {
	var c common
	fs := newFlags("resolve", stderr, &c)
	var req idemadmin.ResolveRequest
	fs.StringVar(&req.Tenant, "tenant", "", "tenant scope of the key or intent; without it, the only tenant that has it")
	fs.StringVar(&req.Intent, "intent", "", "find the record by its `intent` instead of a key")
	fs.StringVar(&req.Verdict, "verdict", "", "executed (the payment took effect) or not_executed (required)")
	fs.StringVar(&req.Note, "note", "", "who decided, on what evidence; kept on the record (required)")
	status := fs.Int("status", 0, "with -verdict executed: the HTTP `status` of the answer found (default 200)")
	body := fs.String("body", "", "with -verdict executed: the answer's body, e.g. the charge as JSON")
	rest, err := parse(fs, &c, args, 1)
	if err != nil {
		return err
	}
	req.Key = first(rest)
	switch {
	case (req.Key != "") == (req.Intent != ""):
		return usageError{"resolve takes one KEY or -intent INTENT"}
	case req.Verdict != idem.VerdictExecuted.String() && req.Verdict != idem.VerdictNotExecuted.String():
		return usageError{fmt.Sprintf("-verdict %q: want executed or not_executed", req.Verdict)}
	case strings.TrimSpace(req.Note) == "":
		return usageError{"-note is required: who decided, and on what evidence"}
	case (*status != 0 || *body != "") && req.Verdict != idem.VerdictExecuted.String():
		return usageError{"-status and -body go only with -verdict executed"}
	case *status != 0 && (*status < 100 || *status > 599):
		return usageError{fmt.Sprintf("-status %d is not an HTTP status", *status)}
	}
	if *status != 0 || *body != "" {
		req.Response = &idemadmin.Response{StatusCode: max(*status, 0), Body: *body}
		if req.Response.StatusCode == 0 {
			req.Response.StatusCode = 200
		}
	}
	b, err := open(ctx, &c, true, now)
	if err != nil {
		return err
	}
	defer b.close()
	if !flagSet(fs, "tenant") {
		if req.Tenant, err = findTenant(ctx, b, req.Key, req.Intent); err != nil {
			return err
		}
	}
	rec, err := b.resolve(ctx, req)
	if err != nil {
		return err
	}
	if c.json {
		return writeRecordJSON(stdout, rec)
	}
	return writeRecord(stdout, rec, now())
}

// recoverFlags configure the idem client that recover runs against a keystore it opens
// itself: the API's base URL, status endpoint and key header, as the service sets them.
type recoverFlags struct {
	baseURL, statusPath, keyHeader, lookup string
	authEnv, auth                          string
	retention                              time.Duration
}

func cmdRecover(ctx context.Context, args []string, stdout, stderr io.Writer, now func() time.Time) error {
	var c common
	var rc recoverFlags
	fs := newFlags("recover", stderr, &c)
	fs.StringVar(&rc.baseURL, "base-url", "", "with -db/-dsn: the API's base `URL`, as the service's Config.BaseURL (required)")
	fs.StringVar(&rc.statusPath, "status-path", "", "with -db/-dsn: the status endpoint, e.g. /v1/payments/operations/{key} (Config.KeyStatusURL)")
	fs.StringVar(&rc.keyHeader, "key-header", "", "with -db/-dsn: the idempotency key header (default Idempotency-Key)")
	fs.StringVar(&rc.authEnv, "auth-env", "", "with -db/-dsn: the environment variable `NAME` whose value is the API's Authorization header, sent only to -base-url's scheme, host and port (a record naming another host by an absolute URL is sent without it)")
	fs.StringVar(&rc.lookup, "lookup", "", "with -db/-dsn: search-by-reference `path` that settles manual records (idem.LookupByReference)")
	fs.DurationVar(&rc.retention, "retention", 0, "with -db/-dsn: Config.Retention; older succeeded/failed records are purged (default 72h)")
	if _, err := parse(fs, &c, args, 0); err != nil {
		return err
	}
	if c.url == "" && rc.baseURL == "" {
		return usageError{"recover on -db or -dsn sends requests: -base-url URL is required (with -status-path and -auth-env as the service has them)"}
	}
	if rc.retention < 0 {
		return usageError{"-retention must not be negative"}
	}
	var err error
	if rc.auth, err = secretFromEnv("-auth-env", rc.authEnv); err != nil {
		return err
	}
	b, err := open(ctx, &c, true, now)
	if err != nil {
		return err
	}
	defer b.close()
	out, err := b.recover(ctx, rc)
	if err != nil {
		return err
	}
	if out.Damaged == nil {
		out.Damaged = []damagedRow{}
	}
	if c.json {
		err = writeJSON(stdout, out)
	} else {
		err = writeRecover(stdout, out)
	}
	if err != nil {
		return err
	}
	// What the run did stands (printed above); the records it could not decode are named,
	// and the exit status (1) says that some need a person or another run.
	for _, d := range out.Damaged {
		fmt.Fprintf(stderr, "idemctl: skipped a record that cannot be decoded (tenant %q, key %q): %s\n", d.Scope, d.Key, d.Error)
	}
	pending, manual := unresolved(out)
	var why []string
	if len(out.Damaged) > 0 {
		why = append(why, fmt.Sprintf("skipped %d record(s) that cannot be decoded, left untouched", len(out.Damaged)))
	}
	if pending > 0 {
		why = append(why, fmt.Sprintf("left %d record(s) pending, outcome still unknown: run recover again later", pending))
	}
	if manual > 0 {
		why = append(why, fmt.Sprintf("left %d record(s) manual: settle them with -lookup or idemctl resolve (idemctl ls -state manual)", manual))
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("recover %s; every other record was reconciled", strings.Join(why, "; "))
}

// unresolved counts the records the run worked on and left pending (their outcome still
// unknown) or manual (a person or a lookup must settle them).
func unresolved(out recoverOut) (pending, manual int) {
	for _, e := range out.Records {
		switch e.Record.State {
		case keystore.StatePending:
			pending++
		case keystore.StateManual:
			manual++
		}
	}
	return pending, manual
}
