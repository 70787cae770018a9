package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemtest"
)

// TestMain lets the test binary play the sender child: the parent (run, in the test)
// re-executes os.Executable(), which here is this binary.
func TestMain(m *testing.M) {
	if raw, ok := os.LookupEnv(childEnv); ok {
		os.Exit(childMain(raw, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// runJSON runs the program in-process and decodes its -json summary.
func runJSON(t *testing.T, args ...string) (summary, int) {
	t.Helper()
	s, code, _ := runJSONStderr(t, args...)
	return s, code
}

// runJSONStderr is runJSON that also returns what the program wrote on stderr.
func runJSONStderr(t *testing.T, args ...string) (summary, int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(append(args, "-json"), &stdout, &stderr)
	t.Logf("stderr:\n%s", stderr.String())
	var s summary
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &s), "stdout: %s", stdout.String())
	return s, code, stderr.String()
}

func invalidCount(n int, seed int64) int {
	k := 0
	for _, p := range generate(n, seed) {
		if p.Invalid {
			k++
		}
	}
	return k
}

func TestCrashesLoseAndDuplicateNothing(t *testing.T) {
	s, code := runJSON(t, "-n", "120", "-crashes", "2", "-seed", "3")
	assert.Equal(t, 0, code)
	assert.Equal(t, "embedded", s.Mode)
	assert.Equal(t, 120, s.Intents)
	assert.Zero(t, s.Duplicates, s.DuplicateDetails)
	assert.Zero(t, s.Lost, s.LostDetails)
	assert.Equal(t, 2, s.Crashes)
	assert.Equal(t, 3, s.Children)
	assert.Equal(t, 120, s.Succeeded+s.Failed)
	assert.Equal(t, invalidCount(120, 3), s.Failed, "only the invalid payments fail")
	assert.Equal(t, s.Succeeded, s.ExecutedOnce)
	assert.Equal(t, s.Succeeded, *s.ServerExecutions)
	for _, c := range s.CrashLog {
		assert.Positive(t, c.Inflight, "kill %+v landed with nothing in flight", c)
	}
	// Killed children may not have reported their last attempts, and an attempt a child
	// counted just before its SIGKILL may never have reached the server: at most one per
	// payment in flight (concurrency 16) at each kill.
	assert.LessOrEqual(t, s.Attempts, int64(*s.ServerRequests+16*s.Crashes))
}

// Stored 5xx, with and without the charge, go through the search by reference: a charge
// found is a success, none gives a new intent; no payment is charged twice.
func TestStoredServerErrorsGoThroughLookup(t *testing.T) {
	s, code := runJSON(t, "-n", "150", "-crashes", "1", "-seed", "4", "-fault-rate", "0.5")
	assert.Equal(t, 0, code)
	assert.Zero(t, s.Duplicates, s.DuplicateDetails)
	assert.Zero(t, s.Lost, s.LostDetails)
	assert.Positive(t, s.StoredErrors)
	assert.Equal(t, s.StoredErrors, s.ReconciledByLookup)
	assert.Zero(t, s.NeedsReconciliation)
	assert.Positive(t, s.NewIntents, "some stored 500s charged nothing: paid under a new intent")
	assert.Less(t, s.NewIntents, s.StoredErrors, "some stored 500s had charged: no new intent")
	assert.Equal(t, invalidCount(150, 4), s.Failed)
	assert.Equal(t, s.Succeeded, s.ExecutedOnce)
	assert.Equal(t, s.Succeeded, *s.ServerExecutions)
}

// Without a lookup a stored 5xx is never paid again: the payment needs reconciliation, and
// the run says so with a non-zero exit.
func TestWithoutLookupNeedsReconciliation(t *testing.T) {
	s, code, stderr := runJSONStderr(t, "-n", "150", "-crashes", "0", "-seed", "4", "-fault-rate", "0.5", "-lookup", "")
	assert.Equal(t, 1, code)
	assert.Zero(t, s.Duplicates, s.DuplicateDetails)
	assert.Zero(t, s.Lost, s.LostDetails)
	assert.Positive(t, s.NeedsReconciliation)
	assert.Equal(t, s.StoredErrors, s.NeedsReconciliation)
	assert.Zero(t, s.ReconciledByLookup)
	assert.Zero(t, s.NewIntents, "never paid again blindly")
	assert.Equal(t, 150, s.Succeeded+s.Failed+s.NeedsReconciliation)
	assert.Contains(t, stderr, fmt.Sprintf("payments: %d of 150 payments need reconciliation", s.NeedsReconciliation))
}

// TestTarget runs against an API the program does not own: no ledger for the program, but
// this test holds the server and checks its ledger too.
func TestTarget(t *testing.T) {
	srv := idemtest.NewServer(idemtest.Config{FaultRate: 0.3, Seed: 11, SlowDelay: 300 * time.Millisecond, RetryAfter: -1})
	defer srv.Close()
	s, code := runJSON(t, "-target", srv.URL, "-n", "60", "-crashes", "1", "-seed", "5", "-run-id", "t1")
	assert.Equal(t, 0, code)
	assert.Equal(t, "target", s.Mode)
	assert.Zero(t, s.Duplicates, s.DuplicateDetails)
	assert.Zero(t, s.Lost, s.LostDetails)
	assert.Equal(t, 1, s.Crashes)
	assert.Nil(t, s.ServerRequests)
	assert.Equal(t, invalidCount(60, 5), s.Failed)
	assert.Equal(t, s.Succeeded, s.ExecutedOnce)
	assert.Equal(t, s.StoredErrors, s.ReconciledByLookup, "the API's search settles every stored 5xx")
	assert.Zero(t, s.NeedsReconciliation)
	ps := generate(60, 5)
	tagRun(ps, "t1")
	for _, p := range ps {
		want := 1
		if p.Invalid {
			want = 0
		}
		assert.Equal(t, want, srv.ExecutionsByReference(p.ref()), p.ref())
	}
	// Run again against the same API: a random -run-id makes new references, where the
	// same ones made the second run count the first run's charges as duplicates.
	s2, code := runJSON(t, "-target", srv.URL, "-n", "60", "-crashes", "0", "-seed", "5")
	assert.Equal(t, 0, code)
	assert.Zero(t, s2.Duplicates, s2.DuplicateDetails)
	assert.Equal(t, s.Succeeded, s2.Succeeded)
	assert.Equal(t, 1, srv.ExecutionsByReference(ps[slices.IndexFunc(ps, func(p payment) bool { return !p.Invalid })].ref()), "the first run's references untouched")
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // how the first line on stderr begins
	}{
		{[]string{"-n", "0"}, "-n, -concurrency and -instances must be at least 1"},
		{[]string{"-crashes", "-1"}, "-n, -concurrency and -instances must be at least 1, -crashes at least 0"},
		{[]string{"-instances", "0"}, "-n, -concurrency and -instances must be at least 1"},
		{[]string{"-instances", "2"}, "-instances above 1 needs a shared keystore: -store postgres://"},
		{[]string{"-instances", "2", "-store", "/tmp/keys.db"}, "-instances above 1 needs a shared keystore"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"-fault-rate", "2"}, "-fault-rate must be a number within 0..1, got 2"},
		{[]string{"-fault-rate", "-0.1"}, "-fault-rate must be a number within 0..1, got -0.1"},
		{[]string{"-fault-rate", "NaN"}, "-fault-rate must be a number within 0..1, got NaN"},
		{[]string{"-fault-rate", "Inf"}, "-fault-rate must be a number within 0..1, got +Inf"},
		{[]string{"-fault-rate", "-inf"}, "-fault-rate must be a number within 0..1, got -Inf"},
		{[]string{"-target", "ftp://example.com"}, "-target must be an absolute http:// or https:// URL"},
		{[]string{"-target", "localhost:8080"}, "-target must be an absolute http:// or https:// URL"},
		{[]string{"-lookup", "/v1/payments?reference="}, "-lookup must contain {reference}"},
		{[]string{"-serve", "127.0.0.1:0", "-target", "http://x"}, "-serve and -target exclude each other"},
		{[]string{"-run-id", "Run#1"}, `-run-id must be 1 to 16 lowercase letters or digits, got "Run#1"`},
		{[]string{"-run-id", "abcdefghijklmnopq"}, "-run-id must be 1 to 16 lowercase letters or digits"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			assert.Equal(t, 2, run(tc.args, &out, &errOut)) // no panic, no run
			assert.Empty(t, out.String())
			line := firstLine(errOut.String())
			assert.True(t, strings.HasPrefix(line, "payments: "+tc.want), "stderr: %s", errOut.String())
		})
	}
	// The edges of a rate are valid.
	o, err := parseFlags([]string{"-fault-rate", "0"}, io.Discard)
	require.NoError(t, err)
	assert.Zero(t, o.faultRate)
	o, err = parseFlags([]string{"-fault-rate", "1"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 1.0, o.faultRate)
}

// firstLine returns s up to its first line break.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// TestFewerCrashesThanRequested: 50 kills cannot fit in 20 payments. The summary and the
// progress line report the kills that happened, and one stderr line says why the rest did not.
func TestFewerCrashesThanRequested(t *testing.T) {
	s, code, stderr := runJSONStderr(t, "-n", "20", "-crashes", "50", "-seed", "1")
	assert.Equal(t, 0, code)
	assert.Zero(t, s.Lost, s.LostDetails)
	assert.Zero(t, s.Duplicates, s.DuplicateDetails)
	assert.Equal(t, 50, s.CrashesRequested)
	assert.Less(t, s.Crashes, 50)
	assert.Len(t, s.CrashLog, s.Crashes)
	assert.Equal(t, 1, strings.Count(stderr, "requested crashes happened"), stderr)
	assert.Contains(t, stderr, fmt.Sprintf("payments: only %d of 50 requested crashes happened: ", s.Crashes))
	assert.Contains(t, stderr, "no work was left to interrupt")
	var lastProgress string
	for line := range strings.Lines(stderr) {
		if strings.HasPrefix(line, "[") {
			lastProgress = line
		}
	}
	assert.True(t, strings.HasSuffix(strings.TrimSpace(lastProgress), fmt.Sprintf("crashes %d", s.Crashes)), lastProgress)

	// All requested crashes happen: no such line.
	_, code, stderr = runJSONStderr(t, "-n", "60", "-crashes", "1", "-seed", "2")
	assert.Equal(t, 0, code)
	assert.NotContains(t, stderr, "requested crashes happened")
}

// TestUnreachableTarget: nothing listens on the target. No payment is executed, so none is
// lost; all are reported not executed, and the run fails, quickly, saying why.
func TestUnreachableTarget(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	target := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close()) // a closed port: every connection is refused

	s, code, stderr := runJSONStderr(t, "-target", target, "-n", "6", "-crashes", "0", "-seed", "4")
	assert.NotEqual(t, 0, code, "the payments were not done")
	assert.Equal(t, "target", s.Mode)
	assert.Zero(t, s.Lost, s.LostDetails)
	assert.Zero(t, s.Duplicates, s.DuplicateDetails)
	assert.Equal(t, s.Intents, s.NotExecuted, "every payment, the invalid one included, was never executed")
	assert.Len(t, s.NotExecutedDetails, s.Intents)
	assert.Zero(t, s.Pending)
	assert.Zero(t, s.Succeeded+s.Failed)
	assert.Zero(t, s.KeyStatusChecks, "records known never executed are not asked about")
	assert.Contains(t, stderr, "payments: 6 of 6 payments were not executed and are still pending: the API at "+target+" never answered (unreachable?)")
	// Reported quickly: per payment, maxUnanswered rounds of the sender and one Recover pass
	// of the cross-check, each of at most MaxAttempts (8), not maxRounds of them. Counted, not
	// timed: a bound on the wall time failed on a loaded 2-core machine.
	assert.Positive(t, s.Attempts)
	assert.LessOrEqual(t, s.Attempts, int64(s.Intents*(maxUnanswered+1)*8), "attempts")

	// The table says the same.
	var stdout, errOut bytes.Buffer
	assert.Equal(t, 1, run([]string{"-target", target, "-n", "3", "-crashes", "0"}, &stdout, &errOut))
	assert.Contains(t, stdout.String(), "not executed (pending)")
	assert.NotContains(t, stdout.String(), "LOST")
	assert.Contains(t, errOut.String(), "never answered (unreachable?)")
}

func TestWorkload(t *testing.T) {
	a, b := generate(500, 9), generate(500, 9)
	assert.Equal(t, a, b, "the same seed gives the same payments in every process")
	assert.Equal(t, 10, invalidCount(500, 9))
	for _, i := range []int{0, 7, 499} {
		for _, try := range []int{1, 2, maxTries} {
			gi, gt, ok := parseIntent(intentName(i, try))
			assert.True(t, ok)
			assert.Equal(t, [2]int{i, try}, [2]int{gi, gt})
		}
	}
	for _, bad := range []string{"order-1", "pay-", "pay-x", "pay-1#1", "pay-1#x", "pay--1"} {
		_, _, ok := parseIntent(bad)
		assert.False(t, ok, bad)
	}
	points := killPoints(1000, 3, 16, 1)
	require.Len(t, points, 3)
	for i, p := range points {
		assert.True(t, p >= 16 && p <= 1000-32, "point %d", p)
		if i > 0 {
			assert.Greater(t, p, points[i-1])
		}
	}
}
