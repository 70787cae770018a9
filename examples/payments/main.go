// Command payments sends payments through idem against a fault-injecting API while its
// sender process is SIGKILLed and restarted, then proves from the server's ledger that no
// payment ran twice and none was lost.
//
//	go run ./examples/payments [-n 1000] [-concurrency 16] [-crashes 3] [-seed 1] [-json]
//	go run ./examples/payments -store postgres://USER@HOST:PORT/DB -instances 3
//
// The parent process runs the API (idemtest, in-process) and starts the senders as child
// processes of this same program. Each child reopens the bbolt keystore, runs
// Client.Recover for what its killed predecessor left pending, then pays every payment not
// finished yet. The server's ledger lives in the parent, so it survives every crash and
// serves as the oracle at the end, counted per business payment (reference), whatever the
// keys. With -target the API is external and its search by reference (when it has one) and
// status endpoint are the oracle instead. -serve ADDR serves the same fault-injecting API
// standalone, for a -target run from another process. Each -target run tags its references
// with a random -run-id (pay-3f9a1c-7), so that a second run against the same API pays new
// references instead of counting the first run's as duplicates.
//
// With -store postgres://... the keystore is PostgreSQL (keystore/pgstore, in a schema of
// its own created and migrated for the run, dropped after it) and -instances N senders run
// at once, sharing the store and the workload (each offers every payment, from its own
// starting point). Each sender is SIGKILLed -crashes times and restarted, except the last,
// which is killed once and never restarted: the others must reclaim its orphans.
//
// A key the server stored a 5xx for is an unknown outcome: the search by reference (-lookup)
// settles it (charge found: succeeded; none: a new intent pays), and without a lookup it is
// reported as needing reconciliation, never paid again blindly.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore/boltstore"
)

// watchdog ends a run that hangs (a bug): the default run takes seconds.
const watchdog = 5 * time.Minute

func main() {
	if raw, ok := os.LookupEnv(childEnv); ok {
		os.Exit(childMain(raw, os.Stdout, os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	n, concurrency, crashes int
	instances               int
	faultRate               float64
	seed                    int64
	store                   string
	json                    bool
	target, statusPath      string
	runID                   string
	lookupPath, serve       string
	dialect                 string
}

// api is the run's apiSpec: the dialect, and idem's routes from the flags.
func (o options) api(embedded bool) apiSpec {
	return apiSpec{Dialect: o.dialect, Embedded: embedded, StatusPath: o.statusPath, LookupPath: o.lookupPath}
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("payments", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.n, "n", 1000, "payments to send")
	fs.IntVar(&o.concurrency, "concurrency", 16, "payments in flight at once")
	fs.Float64Var(&o.faultRate, "fault-rate", 0.3, "share of POSTs the embedded server faults (0..1)")
	fs.Int64Var(&o.seed, "seed", 1, "seed of the workload, the faults and the kill moments")
	fs.IntVar(&o.crashes, "crashes", 3, "times the sender process is SIGKILLed mid-run")
	fs.StringVar(&o.store, "store", "", "keystore: a bbolt file (default: a temporary file, removed after the run), or postgres://... for a fleet")
	fs.IntVar(&o.instances, "instances", 1, "sender processes at once, sharing the keystore (more than 1 needs -store postgres://...)")
	fs.BoolVar(&o.json, "json", false, "print the summary as one JSON object instead of the table")
	fs.StringVar(&o.target, "target", "", "base URL of an external API with the same contract (no embedded server)")
	fs.StringVar(&o.statusPath, "status-path", "/v1/payments/operations/{key}", "status endpoint path; {key} is replaced by the key")
	fs.StringVar(&o.lookupPath, "lookup", "/v1/payments?reference={reference}",
		"search by reference that settles a stored 5xx ({reference} is replaced); empty: none, such payments need reconciliation")
	fs.StringVar(&o.runID, "run-id", "", "tag in every reference (pay-TAG-7), so that runs against one -target API never share a reference; default: a random one with -target, none otherwise")
	fs.StringVar(&o.dialect, "dialect", "idem", "idempotency dialect of the API (embedded server and client profile): "+dialectNames())
	fs.StringVar(&o.serve, "serve", "", "serve the fault-injecting API on this address (e.g. 127.0.0.1:8080) until interrupted, for -target")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.n < 1 || o.concurrency < 1 || o.crashes < 0 || o.instances < 1:
		return o, errors.New("-n, -concurrency and -instances must be at least 1, -crashes at least 0")
	case o.instances > 1 && !isPostgres(o.store):
		return o, errors.New("-instances above 1 needs a shared keystore: -store postgres://... (a bbolt file is locked by one process)")
	}
	if !validRunID(o.runID) {
		return o, fmt.Errorf("-run-id must be 1 to 16 lowercase letters or digits, got %q", o.runID)
	}
	if err := checkRates(fs); err != nil {
		return o, err
	}
	if err := checkDialect(o.dialect); err != nil {
		return o, err
	}
	if o.dialect != "idem" {
		var idemOnly []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "status-path" || f.Name == "lookup" {
				idemOnly = append(idemOnly, "-"+f.Name)
			}
		})
		if len(idemOnly) > 0 {
			return o, fmt.Errorf("%s: idem's routes; -dialect %s settles with its profile's own routes", strings.Join(idemOnly, " and "), o.dialect)
		}
	}
	if o.lookupPath != "" && !strings.Contains(o.lookupPath, "{reference}") {
		return o, fmt.Errorf("-lookup must contain {reference}, got %q", o.lookupPath)
	}
	if o.serve != "" && o.target != "" {
		return o, errors.New("-serve and -target exclude each other: -serve runs the API, -target calls one")
	}
	if o.target != "" {
		u, err := url.Parse(o.target)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return o, fmt.Errorf("-target must be an absolute http:// or https:// URL, got %q", o.target)
		}
	}
	return o, nil
}

// checkRates validates every float flag: each is a rate, a number within 0..1. NaN and
// ±Inf parse as floats and must be refused here, not by a panic in idemtest later.
func checkRates(fs *flag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if !ok || err != nil {
			return
		}
		if v, ok := g.Get().(float64); ok && !(v >= 0 && v <= 1) { // false for NaN too
			err = fmt.Errorf("-%s must be a number within 0..1, got %v", f.Name, v)
		}
	})
	return err
}

// run is the parent: flags, server, children, cross-check, report. It returns the exit
// status: 0 when every payment reached a final state, none ran twice and none was lost; 1
// otherwise (including payments the API never executed, left pending); 2 for bad flags.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "payments:", err)
		return 2
	}
	if o.serve != "" {
		return serve(o, stdout, stderr)
	}
	start := time.Now()
	var spec storeSpec
	var cleanup func()
	if isPostgres(o.store) {
		spec, cleanup, err = preparePostgres(context.Background(), o.store)
	} else {
		spec.Path, cleanup, err = prepareStore(o.store)
	}
	if err != nil {
		fmt.Fprintln(stderr, "payments:", err)
		return 2
	}
	defer cleanup()

	baseURL := o.target
	var srv *idemtest.Server
	if baseURL == "" {
		srv = idemtest.NewServer(serverConfig(o))
		defer srv.Close()
		baseURL = srv.URL
	}

	if o.target != "" && o.runID == "" {
		// Every run makes fresh keys (a new keystore, or a new schema): without a tag of its
		// own, a second run against the same API would pay pay-0... again, and the API's
		// ledger would count them twice.
		o.runID = newRunID()
	}
	payments := generate(o.n, o.seed)
	tagRun(payments, o.runID)
	t := newTally(o.n)
	prog := newProgress(stderr, o.n, t.counts)
	if !o.json {
		faults := fmt.Sprintf("fault rate %.2f", o.faultRate)
		if srv == nil {
			faults = "faults up to the API"
		}
		fmt.Fprintf(stdout, "idem payments demo: %d payments, concurrency %d, %s, seed %d, %d crashes requested\nAPI %s\n",
			o.n, o.concurrency, faults, o.seed, o.crashes, baseURL)
		if o.dialect != "idem" {
			fmt.Fprintf(stdout, "dialect %s: %s\n", o.dialect, dialectNote(o.dialect, srv != nil))
		}
		if o.runID != "" {
			fmt.Fprintf(stdout, "references %s ... %s (-run-id %s)\n", payments[0].ref(), payments[len(payments)-1].ref(), o.runID)
		}
		if spec.fleet() {
			fmt.Fprintf(stdout, "keystore PostgreSQL, schema %s; %d sender instances, the last killed once for good\n",
				spec.Schema, o.instances)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()
	api := o.api(srv != nil)
	cfg := childConfig{BaseURL: baseURL, API: api, Store: spec,
		N: o.n, Seed: o.seed, RunID: o.runID, Concurrency: o.concurrency, Instances: o.instances}
	prog.start()
	requested := o.crashes
	if o.instances > 1 { // -crashes per instance, and one kill for good of the last
		requested = o.crashes*(o.instances-1) + 1
		err = runFleet(ctx, cfg, o.crashes, t, prog)
	} else {
		err = runChildren(ctx, cfg, killPoints(o.n, o.crashes, o.concurrency, o.seed), t, prog)
	}
	prog.finish()
	if err != nil {
		fmt.Fprintln(stderr, "payments:", err)
		return 1
	}
	if msg := t.crashShortfall(requested); msg != "" {
		fmt.Fprintln(stderr, "payments:", msg)
	}

	recs, parentStats, rep, err := finalState(ctx, spec, payments, baseURL, api, o.concurrency)
	if err != nil {
		fmt.Fprintln(stderr, "payments: final reconciliation:", err)
		return 1
	}
	s := summary{Mode: "embedded", Intents: o.n, Store: "bbolt", Instances: o.instances}
	if o.dialect != "idem" {
		s.Dialect = o.dialect // absent for idem: its JSON is as before -dialect existed
	}
	if spec.fleet() {
		s.Store = "postgres"
	}
	for _, p := range payments {
		if p.Invalid {
			s.Invalid++
		}
	}
	if srv != nil {
		s.addVerdict(checkLedger(payments, recs, srv))
		s.addServer(srv.Stats())
		t.mu.Lock()
		s.AckWrongDetails = checkAcknowledged(t.ids, srv)
		s.Acknowledged = len(t.ids)
		t.mu.Unlock()
		s.AckWrong = len(s.AckWrongDetails)
	} else {
		s.Mode = "target"
		s.addVerdict(checkTarget(ctx, payments, recs, t.ids, baseURL, api))
	}
	t.mu.Lock()
	for _, st := range t.stats {
		s.addStats(st)
	}
	s.addStats(parentStats)
	s.Crashes, s.CrashesRequested, s.CrashLog, s.Children = len(t.crashes), o.crashes, t.crashes, t.children
	s.CrashesRequested = requested
	s.PendingFound = t.pending + rep.Pending
	s.Recovered = t.recovered + rep.Succeeded + rep.Failed + rep.Manual
	s.latencies(t.latencies)
	t.mu.Unlock()
	s.RecordsPending = notFinal(recs)
	s.WallMS = time.Since(start).Milliseconds()
	if err := s.write(stdout, o.json); err != nil {
		fmt.Fprintln(stderr, "payments:", err)
		return 1
	}
	code := 0
	if s.Duplicates > 0 || s.Lost > 0 || s.AckWrong > 0 {
		code = 1
	}
	if s.NeedsReconciliation > 0 {
		// Not lost and never paid twice, but not finished: a stored 5xx no lookup settled.
		how := "the search by reference could not tell"
		switch {
		case !api.idem():
			how = "the " + o.dialect + " profile's settling routes could not tell (a person must)"
		case o.lookupPath == "":
			how = "no search by reference (-lookup) was given"
		}
		var parts []string
		if manual := s.NeedsReconciliation - s.UnknownPending; manual > 0 {
			parts = append(parts, fmt.Sprintf("the server stored a 5xx for their key and %s", how))
			if s.UnknownPending > 0 {
				parts[0] = fmt.Sprintf("%d manual: %s", manual, parts[0])
			}
		}
		if s.UnknownPending > 0 {
			parts = append(parts, fmt.Sprintf("%d left pending: their outcome stayed unknown and no settling route of the %s profile could tell", s.UnknownPending, o.dialect))
		}
		fmt.Fprintf(stderr, "payments: %d of %d payments need reconciliation: %s; they were not paid again\n",
			s.NeedsReconciliation, s.Intents, strings.Join(parts, "; "))
		code = 1
	}
	if s.NotExecuted > 0 {
		// Not lost (nothing was executed, and the same key is resent safely next time), but
		// the run did not do its work.
		why := fmt.Sprintf("the API at %s did not complete them (it refused or throttled every attempt)", baseURL)
		if s.unanswered == s.NotExecuted {
			why = fmt.Sprintf("the API at %s never answered (unreachable?)", baseURL)
		}
		fmt.Fprintf(stderr, "payments: %d of %d payments were not executed and are still pending: %s\n",
			s.NotExecuted, s.Intents, why)
		code = 1
	}
	return code
}

// prepareStore returns the keystore path: the one given, which must not hold another run's
// records (they would be answered from the keystore, unknown to this run's server), or a
// new temporary file removed by cleanup.
func prepareStore(path string) (string, func(), error) {
	if path == "" {
		dir, err := os.MkdirTemp("", "idem-payments-")
		if err != nil {
			return "", nil, err
		}
		return filepath.Join(dir, "keys.db"), func() { os.RemoveAll(dir) }, nil
	}
	// Opened here, created if missing: a file that cannot be (a read-only folder, an empty or
	// damaged file) is a keystore that cannot be prepared (exit 2), not a child failing
	// mid-run (exit 1).
	{
		st, err := boltstore.Open(path, nil)
		if err != nil {
			return "", nil, err
		}
		recs, err := st.List(context.Background())
		st.Close()
		if err != nil {
			return "", nil, err
		}
		if len(recs) > 0 {
			return "", nil, fmt.Errorf("keystore %s already holds %d records from another run; remove it or choose another -store", path, len(recs))
		}
	}
	return path, func() {}, nil
}

// validRunID reports a -run-id that is empty or 1 to 16 lowercase letters and digits: it goes
// into references, request bodies and the search's URL as it is.
func validRunID(id string) bool {
	if len(id) > 16 {
		return false
	}
	for _, c := range id {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// newRunID is a random -run-id: 6 hex digits.
func newRunID() string {
	var b [3]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
