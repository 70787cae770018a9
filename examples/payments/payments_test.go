package main

import (
	"bytes"
	"encoding/json"
	"os"
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
	var stdout, stderr bytes.Buffer
	code := run(append(args, "-json"), &stdout, &stderr)
	t.Logf("stderr:\n%s", stderr.String())
	var s summary
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &s), "stdout: %s", stdout.String())
	return s, code
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
	// Killed children may not have reported their last attempts; never the other way round.
	assert.GreaterOrEqual(t, int64(*s.ServerRequests), s.Attempts)
}

// TestTarget runs against an API the program does not own: no ledger for the program, but
// this test holds the server and checks its ledger too.
func TestTarget(t *testing.T) {
	srv := idemtest.NewServer(idemtest.Config{FaultRate: 0.3, Seed: 11, SlowDelay: 300 * time.Millisecond, RetryAfter: -1})
	defer srv.Close()
	s, code := runJSON(t, "-target", srv.URL, "-n", "60", "-crashes", "1", "-seed", "5")
	assert.Equal(t, 0, code)
	assert.Equal(t, "target", s.Mode)
	assert.Zero(t, s.Duplicates, s.DuplicateDetails)
	assert.Zero(t, s.Lost, s.LostDetails)
	assert.Equal(t, 1, s.Crashes)
	assert.Nil(t, s.ServerRequests)
	assert.Equal(t, invalidCount(60, 5), s.Failed)
	assert.Equal(t, s.Succeeded, s.ExecutedOnce)
	for _, p := range generate(60, 5) {
		want := 1
		if p.Invalid {
			want = 0
		}
		assert.Equal(t, want, srv.ExecutionsByReference(p.ref()), p.ref())
	}
}

func TestBadFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	assert.Equal(t, 2, run([]string{"-n", "0"}, &out, &errOut))
	assert.Equal(t, 2, run([]string{"-fault-rate", "2"}, &out, &errOut))
	assert.Equal(t, 2, run([]string{"extra"}, &out, &errOut))
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
