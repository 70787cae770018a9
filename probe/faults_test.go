package probe_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/probe"
)

// Against idemtest injecting random faults (503, 429, resets, 502, lost and 500 answers after
// a commit, stored 500s, slow requests), no row is Broken: a transient answer is resent a
// bounded number of times and at worst leaves its row NotObserved, and a stored 500 makes
// the probe start another operation. The server's ledger agrees: no reference executed twice.
func TestFaultsAreNotBroken(t *testing.T) {
	for _, seed := range []int64{1, 2, 3, 4, 5, 6} {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			t.Parallel()
			api := idemtest.NewServer(idemtest.Config{FaultRate: 0.3, Seed: seed, RetryAfter: -1,
				SlowDelay: 100 * time.Millisecond})
			defer api.Close()
			rep := run(t, api.URL, func(c *probe.Config) { c.Trials = 9 }) // the trials' power is not this test's subject
			for _, r := range rep.Rows {
				if r.Result == probe.Broken {
					t.Errorf("%s broken: %s", r.Check, r.Evidence)
				}
			}
			if r, _ := rep.Row(probe.CheckCreate); r.Result != probe.Honoured {
				t.Errorf("create = %s (%s)", r.Result, r.Evidence)
			}
			faults := 0
			for _, n := range api.Stats().Faults {
				faults += n
			}
			if faults == 0 {
				t.Errorf("no fault took effect: stats %v", api.Stats())
			}
			for _, e := range api.Executions() {
				if n := api.ExecutionsByReference(e.Reference); n != 1 {
					t.Errorf("reference %s executed %d times", e.Reference, n)
				}
			}
			t.Logf("faults %v", api.Stats().Faults)
			for _, r := range rep.Rows {
				t.Logf("%-18s %-12s %s", r.Check, r.Result, r.Evidence)
			}
		})
	}
}
