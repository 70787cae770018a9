package idemtemporal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtemporal"
	"github.com/idemkit/idem/idemtest"
)

// Payments is a worker's activities: one Payer, built once with the worker's idem client
// (its Store shared by every worker, keystore/pgstore, in production).
type Payments struct {
	Payer *idemtemporal.Payer
}

// Charge is the activity. Its error goes back to Temporal as Payer.Do made it: retryable
// under the same key while the outcome is unknown, non-retryable for a 4xx or key reuse,
// retried hourly without sending while a stored 5xx waits for Client.Resolve.
func (p *Payments) Charge(ctx context.Context, reference string, amount int) (string, error) {
	body := fmt.Sprintf(`{"amount":%d,"currency":"EUR","customer":"cus_1","reference":%q}`, amount, reference)
	res, err := p.Payer.Do(ctx, http.MethodPost, "/v1/payments", []byte(body), nil)
	if err != nil {
		return "", err
	}
	var charge struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(res.Body, &charge); err != nil {
		return "", err
	}
	return charge.ID, nil
}

// An activity pays through idem under the key of its step. Here Temporal's test environment
// runs it against idemtest, whose answer to the first attempt is lost after the charge: idem
// asks the status endpoint and returns the charge without paying twice. A worker registers
// the activity with w.RegisterActivity(&Payments{Payer: payer}).
func Example() {
	api := idemtest.NewServer(idemtest.Config{RetryAfter: -1})
	defer api.Close()
	api.Script(idemtest.FaultDropAfterCommit)

	client, err := idem.NewClient(idem.Config{BaseURL: api.URL, KeyStatusURL: "/v1/payments/operations/{key}"})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	payer, err := idemtemporal.New(idemtemporal.Config{Client: client})
	if err != nil {
		panic(err)
	}

	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := suite.NewTestActivityEnvironment()
	payments := &Payments{Payer: payer}
	env.RegisterActivity(payments)
	val, err := env.ExecuteActivity(payments.Charge, "order-7", 990)
	if err != nil {
		panic(err)
	}
	var id string
	if err := val.Get(&id); err != nil {
		panic(err)
	}
	fmt.Println("charge:", id)
	fmt.Println("charges for order-7:", api.ExecutionsByReference("order-7"))
	fmt.Println("requests:", api.Stats().Requests, "status checks:", api.KeyStatusChecks())
	// Output:
	// charge: pay_1
	// charges for order-7: 1
	// requests: 1 status checks: 1
}
