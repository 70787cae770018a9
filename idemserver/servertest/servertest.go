// Package servertest is the conformance suite that every idemserver.Backend passes: the
// backend's own rules (claim, replay, conflict, release, checkpoint, takeover, expiry, purge)
// and the middleware's contract served through it over HTTP.
//
// A backend's test calls Run with a function that opens a new, empty backend:
//
//	func TestConformance(t *testing.T) {
//		servertest.Run(t, func(t *testing.T) idemserver.Backend { return idemserver.NewMemory() })
//	}
//
// The suite uses only the standard library, so importing it adds no dependency.
package servertest

import (
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
)

// Run runs every conformance case as a subtest of t. open is called once per subtest and must
// return a new, empty backend; release whatever it holds with t.Cleanup.
func Run(t *testing.T, open func(t *testing.T) idemserver.Backend) {
	cases := []struct {
		name string
		fn   func(t *testing.T, b idemserver.Backend)
	}{
		{"ClaimRules", testClaimRules},
		{"ReleaseFreesKey", testRelease},
		{"CheckpointTakeover", testCheckpointTakeover},
		{"ExpiryAndPurge", testExpiryAndPurge},
		{"ScopeIsolation", testScopeIsolation},
		{"ReplayByteForByte", testReplay},
		{"ReplayKeepsHeaderBytes", testReplayHeaderBytes},
		{"KeyReuse422", testKeyReuse},
		{"CanonicalJSON", testCanonicalJSON},
		{"KeyHeaderErrors", testKeyErrors},
		{"PreExecutionNotStored", testPreExecution},
		{"ExplicitBegin", testExplicitBegin},
		{"PanicNeverRunsTwice", testPanic},
		{"InProgress409", testInProgress},
		{"StatusEndpoint", testStatus},
		{"TenantIsolationHTTP", testTenantIsolation},
		{"RetentionHTTP", testRetention},
		{"Concurrent100", testConcurrent100},
		{"Concurrent100Wait", testConcurrent100Wait},
		{"WaitTimeout", testWaitTimeout},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, open(t)) })
	}
}

// Clock is a settable clock for Config.Now, safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at a fixed instant.
func NewClock() *Clock { return &Clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
