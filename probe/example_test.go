package probe_test

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/probe"
)

// Probe a sandbox API (here idemtest, whose first concurrent request is held so that the
// in-progress check sees a 409) and print each row's verdict and the suggested KeyStatusURL.
func ExampleRun() {
	api := idemtest.NewServer(idemtest.Config{SlowDelay: 300 * time.Millisecond})
	defer api.Close()
	api.Script(idemtest.FaultNone, idemtest.FaultNone, idemtest.FaultNone, idemtest.FaultSlow)

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
