package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFleet runs the main job as a fleet: 3 sender processes on one PostgreSQL keystore
// (a schema of its own) and one idemtest server, each SIGKILLed at random moments and
// restarted, the last killed once for good. The ledger must show every reference charged at
// most once, every acknowledged payment charged exactly once under the id its sender got,
// and every record final or manual at the end; the dead instance's orphans were reclaimed.
func TestFleet(t *testing.T) {
	dsn := os.Getenv("IDEM_TEST_PG_DSN")
	if dsn == "" {
		t.Skip("IDEM_TEST_PG_DSN not set: skipping the PostgreSQL fleet run (e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)")
	}
	s, code := runJSON(t, "-n", "400", "-instances", "3", "-crashes", "2", "-seed", "11", "-store", dsn)
	assert.Equal(t, 0, code)
	assert.Equal(t, "postgres", s.Store)
	assert.Equal(t, 3, s.Instances)
	assert.Equal(t, 0, s.Duplicates, "%v", s.DuplicateDetails)
	assert.Equal(t, 0, s.Lost, "%v", s.LostDetails)
	assert.Equal(t, 0, s.AckWrong, "%v", s.AckWrongDetails)
	assert.Equal(t, 0, s.RecordsPending, "every record final or manual")
	assert.Equal(t, 0, s.Pending+s.NotExecuted)
	assert.Equal(t, s.Succeeded, s.ExecutedOnce, "every succeeded payment charged once")
	assert.Equal(t, s.Intents, s.Succeeded+s.Failed+s.NeedsReconciliation)
	assert.Positive(t, s.Acknowledged)

	require.Equal(t, 5, s.CrashesRequested, "2 per restarted instance, 1 for good")
	kills := map[int]int{}
	for _, c := range s.CrashLog {
		kills[c.Instance]++
	}
	assert.Equal(t, 1, kills[2], "the last instance dies once, for good")
	assert.GreaterOrEqual(t, kills[0], 1)
	assert.GreaterOrEqual(t, kills[1], 1)
	assert.GreaterOrEqual(t, s.Crashes, 4)
	assert.Positive(t, s.OrphansReclaimed, "the dead instance's records were taken over")
	assert.Positive(t, s.LeaseWaits, "instances met on the same intents and waited for each other")
}
