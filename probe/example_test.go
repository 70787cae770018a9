package probe_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/probe"
)

// Probe a sandbox API (here idemtest, whose concurrent requests are held so that the
// in-progress check sees a 409) and print each row's verdict and the suggested KeyStatusURL.
func ExampleRun() {
	api := idemtest.NewServer(idemtest.Config{SlowDelay: 300 * time.Millisecond})
	defer api.Close()
	// create, replay and key reuse are served at once; the key's claimer among the concurrent
	// requests is held (faults are taken on arrival, so each of them gets FaultSlow).
	api.Script(idemtest.FaultNone, idemtest.FaultNone, idemtest.FaultNone)
	api.Script(slices.Repeat([]idemtest.Fault{idemtest.FaultSlow}, probe.DefaultConcurrency)...)

	rep, err := probe.Run(context.Background(), probe.Config{BaseURL: api.URL, Sandbox: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, row := range rep.Rows {
		fmt.Printf("%-17s %s\n", row.Check, row.Result)
	}
	fmt.Println("KeyStatusURL:", rep.Suggestion.KeyStatusURL)
	// Output:
	// create            honoured
	// replay            honoured
	// replay-marker     honoured
	// key-reuse         honoured
	// in-progress       honoured
	// status-completed  honoured
	// status-not-found  honoured
	// retry-after       honoured
	// executes-once     honoured
	// KeyStatusURL: /v1/payments/operations/{key}
}
