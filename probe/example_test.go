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
// in-progress check sees a 409, and which answers a 5xx after a charge on 30% of the
// payments, storing it) and print each row's verdict, the verdict, the power of the trials,
// the charges it made and the profile it suggests.
func ExampleRun() {
	api := idemtest.NewServer(idemtest.Config{SlowDelay: 300 * time.Millisecond, FaultRate: 0.3, Seed: 7,
		Faults: []idemtest.Fault{idemtest.FaultStored500AfterCharge}})
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
	fmt.Println("verdict:", rep.Verdict)
	fmt.Printf("power: %d trials, %.1f%% against a server charging twice after 10%% of its executions\n",
		rep.Power.Trials, rep.Power.Probability*100)
	fmt.Println("charges found by the search equal the server's ledger:", rep.Charges.Found == len(api.Executions()))
	fmt.Println("profile:", rep.Suggestion.Profile)
	// Output:
	// create            honoured
	// replay            honoured
	// replay-marker     honoured
	// key-reuse         honoured
	// in-progress       honoured
	// lost-response     honoured
	// stored-5xx        honoured
	// retention         not observed
	// status-completed  honoured
	// status-not-found  honoured
	// retry-after       honoured
	// executes-once     honoured
	// verdict: safe
	// power: 30 trials, 95.8% against a server charging twice after 10% of its executions
	// charges found by the search equal the server's ledger: true
	// profile: idem
}
