package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/idemkit/idem/probe"
)

// probeUsage is printed for "idemctl probe -h" and for a usage error.
const probeUsage = `usage: idemctl probe URL -sandbox [flags]

Sends the Idempotency-Key contract's checks to the API at URL and prints which rows it
honours (each with the trials it rests on), the verdict, the power of the trials, the real
charges it made, the dialect of docs/DIALECTS.md the API speaks, and the idem client
configuration that fits it. docs/PROBE.md says what each row means.

THE PROBE CREATES REAL OPERATIONS (payments, with the default body): about 35 with the
defaults. Point it only at a sandbox or test environment. It sends nothing unless -sandbox
says the target is one; -dry-run lists the payments it would make and sends nothing.

flags:
  -sandbox            required: the target is a sandbox where operations may be created
  -dry-run            list the payments a run would make, per check, and send nothing
  -json               print the report (or with -dry-run the plan) as JSON
  -path P             the POST endpoint (default /v1/payments)
  -body FILE          the JSON body of one operation, with {reference} where the probe puts a
                      fresh reference (default: a 100 EUR payment to cus_probe); the key-reuse
                      check sends it with another reference
  -status-path P      the status endpoint with {key} (default PATH/operations/{key}; - for none)
  -search-path P      the search by reference with {reference} (default PATH?reference={reference};
                      - for none: the rows that count charges are then not observed)
  -search-lag D       wait D after the last payment before the search counts (Stripe's
                      search lags about 1m; default 0)
  -key-header H       the idempotency key header (default Idempotency-Key)
  -header 'N: V'      a header sent with every request, e.g. a tenant header (repeatable)
  -auth-env VAR       send the Authorization header from environment variable VAR
                      (credentials never go on the command line)
  -trials N           payments sent and resent with their key, every third with its answer
                      cut (default 30: an API charging again after 10% of its executions is
                      caught with probability 95.8%; at most 10000)
  -retention D        the key retention the API advertises (e.g. 24h); the retention row
                      resends a key 90% into it when it is at most -retention-wait
  -retention-wait D   the longest the probe waits for that (default 1m)
  -concurrency N      identical requests sent at once for the in-progress check (default 8,
                      at most 1000)
  -rounds N           bursts of them at most, one operation each, until one overlaps
                      (default 3, at most 100)
  -timeout D          per request (default 10s)

exit status: 0 the verdict is safe (every safety row observed honoured); 1 a row broken, or
the probe failed (the API unreachable or refusing the credentials included); 2 usage error
(no -sandbox included); 3 not proven safe (a safety row not observed); a dry run exits 0
`

// probeHeaders is the repeatable -header flag.
type probeHeaders http.Header

func (h probeHeaders) String() string { return "" }

func (h probeHeaders) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, " \t") {
		return fmt.Errorf("header %q is not 'Name: value'", v)
	}
	http.Header(h).Add(name, strings.TrimSpace(value))
	return nil
}

// runProbe is "idemctl probe": it returns the exit status.
func runProbe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		cfg       probe.Config
		asJSON    = fs.Bool("json", false, "")
		authEnv   = fs.String("auth-env", "", "")
		bodyFile  = fs.String("body", "", "")
		timeout   = fs.Duration("timeout", probe.DefaultTimeout, "")
		dryRun    = fs.Bool("dry-run", false, "")
		headers   = probeHeaders{}
		usageFail = func(msg string) int {
			fmt.Fprintf(stderr, "idemctl probe: %s\n\n%s", msg, probeUsage)
			return 2
		}
	)
	fs.BoolVar(&cfg.Sandbox, "sandbox", false, "")
	fs.StringVar(&cfg.Path, "path", "", "")
	fs.StringVar(&cfg.KeyStatusPath, "status-path", "", "")
	fs.StringVar(&cfg.SearchPath, "search-path", "", "")
	fs.StringVar(&cfg.KeyHeader, "key-header", "", "")
	fs.IntVar(&cfg.Concurrency, "concurrency", 0, "")
	fs.IntVar(&cfg.Rounds, "rounds", 0, "")
	fs.IntVar(&cfg.Trials, "trials", 0, "")
	fs.DurationVar(&cfg.Retention, "retention", 0, "")
	fs.DurationVar(&cfg.RetentionWait, "retention-wait", 0, "")
	fs.DurationVar(&cfg.SearchLag, "search-lag", 0, "")
	fs.Var(headers, "header", "")

	// The URL may come before or after the flags.
	var urls []string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stderr, probeUsage)
				return 0
			}
			return usageFail(err.Error())
		}
		if fs.NArg() == 0 {
			break
		}
		urls = append(urls, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	switch {
	case len(urls) != 1:
		return usageFail(fmt.Sprintf("want one URL, got %d", len(urls)))
	case !cfg.Sandbox && !*dryRun:
		return usageFail("refusing to probe " + urls[0] + ": the probe creates real operations; add -sandbox if it is a sandbox")
	case *timeout <= 0:
		return usageFail("-timeout must be positive")
	}
	cfg.BaseURL = urls[0]
	if *bodyFile != "" {
		tmpl, err := os.ReadFile(*bodyFile)
		if err != nil {
			return usageFail("-body: " + err.Error())
		}
		if !strings.Contains(string(tmpl), "{reference}") {
			return usageFail("-body: " + *bodyFile + " has no {reference} placeholder")
		}
		cfg.Body = func(ref string) []byte { return []byte(strings.ReplaceAll(string(tmpl), "{reference}", ref)) }
		cfg.OtherBody = func(ref string) []byte { return cfg.Body(ref + "-other") }
	}
	if *authEnv != "" {
		v, ok := os.LookupEnv(*authEnv)
		if !ok || v == "" {
			return usageFail("-auth-env: environment variable " + *authEnv + " is not set")
		}
		http.Header(headers).Set("Authorization", v)
	}
	cfg.Header = http.Header(headers)
	cfg.HTTPClient = &http.Client{Timeout: *timeout}

	if *dryRun {
		return printPlan(cfg, *asJSON, stdout, usageFail)
	}
	rep, err := probe.Run(context.Background(), cfg)
	if errors.Is(err, probe.ErrInvalidConfig) {
		return usageFail(err.Error())
	}
	if err != nil {
		fmt.Fprintln(stderr, "idemctl probe:", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = rep.WriteText(stdout, 100)
	}
	if err != nil {
		fmt.Fprintln(stderr, "idemctl probe:", err)
		return 1
	}
	if rep.Unauthorized {
		fmt.Fprintln(stderr, "idemctl probe: the API refused the probe's credentials (401 or 403): pass them with -auth-env NAME or -header; nothing above was observed behind them")
		return 1
	}
	switch rep.Verdict {
	case probe.VerdictSafe:
		return 0
	case probe.VerdictNotProven:
		return 3
	}
	return 1
}

// printPlan is "idemctl probe -dry-run": the payments a run would make, nothing sent.
func printPlan(cfg probe.Config, asJSON bool, stdout io.Writer, usageFail func(string) int) int {
	plan, err := probe.NewPlan(cfg)
	if err != nil {
		return usageFail(err.Error())
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(plan)
	} else {
		err = plan.WriteText(stdout)
	}
	if err != nil {
		return 1
	}
	return 0
}
