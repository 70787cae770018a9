package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/probe"
)

func probeCmd(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = runProbe(args, &out, &errb)
	return code, out.String(), errb.String()
}

// slowIdemtest is idemtest with the probe's concurrent requests held, so that the
// in-progress check sees 409s. Every request of the burst is scripted slow: a fault is taken
// on arrival, before the middleware claims the key, so the first to arrive need not be the
// one that claims it (with only that one slow, the check saw no overlap and sent two more
// bursts, two more payments).
// After the burst, a stored 500 after a charge on 30% of the payments: the stored-5xx row
// needs a 5xx to be observed, and the verdict is safe only when it is.
func slowIdemtest(t *testing.T) *idemtest.Server {
	t.Helper()
	api := idemtest.NewServer(idemtest.Config{SlowDelay: 400 * time.Millisecond, FaultRate: 0.3, Seed: 7,
		Faults: []idemtest.Fault{idemtest.FaultStored500AfterCharge}})
	t.Cleanup(api.Close)
	api.Script(idemtest.FaultNone, idemtest.FaultNone, idemtest.FaultNone)
	api.Script(slices.Repeat([]idemtest.Fault{idemtest.FaultSlow}, probe.DefaultConcurrency)...)
	return api
}

func TestProbeTableAgainstIdemtest(t *testing.T) {
	api := slowIdemtest(t)
	t.Setenv("IDEM_PROBE_TEST_AUTH", "Bearer sk_sandbox")
	code, out, errOut := probeCmd(api.URL, "-sandbox", "-auth-env", "IDEM_PROBE_TEST_AUTH", "-header", "X-Tenant: acme")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q\n%s", code, errOut, out)
	}
	for _, c := range probe.Checks {
		res := probe.Honoured
		if c == probe.CheckRetention {
			res = probe.NotObserved
		}
		if !strings.Contains(out, fmt.Sprintf("%-17s %-13s ", c, res)) {
			t.Errorf("row %s not %s:\n%s", c, res, out)
		}
	}
	ex := api.Executions()
	for _, s := range []string{"verdict: safe", fmt.Sprintf("the search lists %d charges", len(ex)), "power: 30 trials", "probability 95.8%",
		`Profile: profile.ByName("idem")`} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), s) { // wrapped lines joined
			t.Errorf("no %q in:\n%s", s, out)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if len(l) > 100 {
			t.Errorf("line of %d columns: %q", len(l), l)
		}
	}
	if !strings.Contains(out, "KeyStatusURL: /v1/payments/operations/{key}") {
		t.Errorf("no KeyStatusURL suggestion:\n%s", out)
	}
	if strings.Contains(out, "sk_sandbox") {
		t.Error("the credential is printed")
	}
	for _, e := range ex {
		if e.Tenant != "Bearer sk_sandbox" || api.ExecutionsByReference(e.Reference) != 1 {
			t.Errorf("execution %+v, want every payment once under the -auth-env credential", e)
		}
	}
}

func TestProbeJSON(t *testing.T) {
	api := slowIdemtest(t)
	code, out, _ := probeCmd("-sandbox", "-json", "-status-path", "/v1/payments/operations/{key}", api.URL)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	var rep probe.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(rep.Rows) != len(probe.Checks) || len(rep.Broken()) != 0 || rep.Suggestion.KeyStatusURL != "/v1/payments/operations/{key}" ||
		rep.Verdict != probe.VerdictSafe || rep.Charges.Found != len(api.Executions()) {
		t.Errorf("report = %+v", rep)
	}
	for _, r := range rep.Rows {
		if r.Result != probe.Honoured && r.Check != probe.CheckRetention {
			t.Errorf("%s: %s (%s)", r.Check, r.Result, r.Evidence)
		}
	}
}

// -body gives the operation's JSON, with a fresh reference in place of {reference}.
func TestProbeBodyTemplate(t *testing.T) {
	api := slowIdemtest(t)
	body := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(body, []byte(`{"amount":4200,"currency":"USD","customer":"cus_tmpl","reference":"{reference}"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ := probeCmd(api.URL, "-sandbox", "-body", body)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	ex := api.Executions()
	if len(ex) < 2 || ex[0].Amount != 4200 || ex[0].Currency != "USD" || ex[0].Customer != "cus_tmpl" ||
		!strings.HasPrefix(ex[0].Reference, "probe-") {
		t.Errorf("ledger = %+v", ex)
	}
	if api.Stats().KeyReused != 1 {
		t.Errorf("the key-reuse check did not send another body: %v", api.Stats())
	}
}

// A server that executes every request names its broken rows and exits 1.
func TestProbeBrokenServerExitsOne(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"ch_%d"}`, n.Add(1))
	}))
	defer srv.Close()
	code, out, _ := probeCmd(srv.URL, "-sandbox", "-json", "-search-path", "-")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, out)
	}
	var rep probe.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	want := []string{probe.CheckReplay, probe.CheckKeyReuse, probe.CheckInProgress, probe.CheckExecutesOnce}
	if got := rep.Broken(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("broken = %v, want %v", got, want)
	}
	if rep.Suggestion.Safe || rep.Verdict != probe.VerdictUnsafe {
		t.Errorf("verdict %s, safe %v", rep.Verdict, rep.Suggestion.Safe)
	}
	// Without a search, the charges are counted by the answers only: every POST executed.
	if rep.Charges.Found != -1 || rep.Charges.Answered2xx != rep.Charges.Keys {
		t.Errorf("charges %+v", rep.Charges)
	}
}

// An API that honours what it shows but has no search: nothing broken, yet not proven safe
// (exit 3), the rows that need the search named.
func TestProbeNotProvenExitsThree(t *testing.T) {
	api := slowIdemtest(t)
	code, out, _ := probeCmd(api.URL, "-sandbox", "-search-path", "-")
	if code != 3 || !strings.Contains(out, "NOT PROVEN SAFE") || !strings.Contains(out, "executes-once     not observed") {
		t.Fatalf("exit %d, want 3\n%s", code, out)
	}
}

// -dry-run lists the payments a run would make and sends nothing, without -sandbox.
func TestProbeDryRun(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	code, out, errOut := probeCmd(srv.URL, "-dry-run", "-trials", "12")
	if code != 0 || errOut != "" || hits.Load() != 0 {
		t.Fatalf("exit %d, stderr %q, %d requests", code, errOut, hits.Load())
	}
	// 1 create + 1 burst + 12 trials at least; 5 + 1 + 3 + 12 at most.
	for _, s := range []string{"dry run: nothing sent", "real charges: 14 to 21 payments", "12 payments, each resent once", `"reference":"probe-<uuid>"`} {
		if !strings.Contains(out, s) {
			t.Errorf("no %q in:\n%s", s, out)
		}
	}
	code, out, _ = probeCmd(srv.URL, "-dry-run", "-json")
	var plan probe.Plan
	if code != 0 || json.Unmarshal([]byte(out), &plan) != nil || plan.Min != 32 || plan.Max != 39 {
		t.Errorf("exit %d, plan %+v\n%s", code, plan, out)
	}
	if hits.Load() != 0 {
		t.Errorf("%d requests sent by a dry run", hits.Load())
	}
}

// An API that cannot be reached is no verdict: no table, no broken row, exit 1 and stderr
// saying the API is unreachable, with the transport error.
func TestProbeUnreachableExitsOne(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	code, out, errOut := probeCmd(url, "-sandbox")
	if code != 1 || out != "" {
		t.Fatalf("exit %d, stdout %q, want 1 and nothing", code, out)
	}
	for _, s := range []string{"cannot be reached", url, "connection refused"} {
		if !strings.Contains(errOut, s) {
			t.Errorf("stderr %q does not say %q", errOut, s)
		}
	}
	if strings.Contains(errOut, string(probe.Broken)) {
		t.Errorf("stderr %q gives a broken verdict", errOut)
	}
}

// An API that refuses the probe's credentials is not graded broken, and the probe fails
// (exit 1) saying how to pass them: it exited 0 with every row "not observed" (newcomer run).
func TestProbeUnauthorizedExitsOne(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusUnauthorized) }))
	defer srv.Close()
	code, out, errOut := probeCmd(srv.URL, "-sandbox")
	if code != 1 || !strings.Contains(errOut, "refused the probe's credentials") || !strings.Contains(errOut, "-auth-env") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if strings.Contains(out, string(probe.Broken)) {
		t.Errorf("report %q gives a broken verdict", out)
	}
}

// Without -sandbox (or with bad flags) nothing is sent and the exit status is 2.
func TestProbeUsage(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	t.Setenv("IDEM_PROBE_EMPTY", "")
	noPlaceholder := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(noPlaceholder, []byte(`{"amount":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{srv.URL}, "creates real operations"},
		{[]string{"-sandbox"}, "want one URL, got 0"},
		{[]string{"-sandbox", srv.URL, srv.URL}, "want one URL, got 2"},
		{[]string{"-sandbox", "-header", "nocolon", srv.URL}, "not 'Name: value'"},
		{[]string{"-sandbox", "-auth-env", "IDEM_PROBE_EMPTY", srv.URL}, "IDEM_PROBE_EMPTY is not set"},
		{[]string{"-sandbox", "-timeout", "0s", srv.URL}, "-timeout"},
		{[]string{"-sandbox", "-status-path", "/status", srv.URL}, "StatusPath"},
		{[]string{"-sandbox", "-bogus", srv.URL}, "-bogus"},
		{[]string{"-sandbox", "-body", "/nonexistent/body.json", srv.URL}, "-body"},
		{[]string{"-sandbox", "-body", noPlaceholder, srv.URL}, "no {reference} placeholder"},
		{[]string{"-sandbox", "-rounds", "-1", srv.URL}, "Rounds"},
		{[]string{"-sandbox", "-trials", "-1", srv.URL}, "Trials"},
		{[]string{"-dry-run", "-trials", "-1", srv.URL}, "Trials"},
	} {
		code, out, errOut := probeCmd(tc.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "usage: idemctl probe") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 naming %q", tc.args, code, out, errOut, tc.want)
		}
	}
	if hits.Load() != 0 {
		t.Errorf("%d requests sent by refused invocations", hits.Load())
	}
	if code, _, errOut := probeCmd("-h"); code != 0 || !strings.Contains(errOut, "CREATES REAL OPERATIONS") {
		t.Errorf("-h: exit %d, %q", code, errOut)
	}
}

// Absurd counts are a usage error naming the cap, before anything is sent or allocated: a
// dry run does not add them up, a run does not start a goroutine per request.
func TestProbeRefusesCountsAboveTheCaps(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	const huge = "9223372036854775807"
	for _, args := range [][]string{
		{"-dry-run", "-trials", huge},
		{"-dry-run", "-trials", fmt.Sprint(probe.MaxTrials + 1)},
		{"-sandbox", "-concurrency", huge},
		{"-sandbox", "-rounds", fmt.Sprint(probe.MaxRounds + 1)},
	} {
		code, out, errOut := probeCmd(append([]string{srv.URL}, args...)...)
		if code != 2 || out != "" || !strings.Contains(errOut, "outside 0 to") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and the cap on stderr", args, code, out, errOut)
		}
	}
	if hits.Load() != 0 {
		t.Errorf("%d requests sent", hits.Load())
	}
}
