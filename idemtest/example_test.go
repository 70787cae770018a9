package idemtest_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

// chargeOrder is the code under test, as it would be in a user's service: it pays an order
// through an idem.Client.
func chargeOrder(ctx context.Context, c *idem.Client, order string, amount int) (string, error) {
	body := fmt.Sprintf(`{"amount":%d,"currency":"EUR","customer":"cus_1","reference":%q}`, amount, order)
	res, err := c.Do(ctx, idem.NewOperation(http.MethodPost, "/v1/payments", []byte(body), idem.WithIntent(order)))
	if err != nil {
		return "", err
	}
	return res.Key, nil
}

// idemtest in a user's test: script the faults the test is about, run the code under test,
// then ask the ledger how often the server executed the payment. In a test function, the
// prints are assertions (t.Fatalf when the executions are not 1).
func Example() {
	api := idemtest.NewServer(idemtest.Config{RetryAfter: -1}) // "Retry-After: 0": no waiting in tests
	defer api.Close()
	// The first attempt is refused with 503, the second is executed and its answer lost.
	api.Script(idemtest.Fault503, idemtest.FaultDropAfterCommit)

	c, err := idem.NewClient(idem.Config{BaseURL: api.URL, KeyStatusURL: "/v1/payments/operations/{key}"})
	if err != nil {
		panic(err)
	}
	key, err := chargeOrder(context.Background(), c, "order-7", 990)
	fmt.Println("error:", err)
	fmt.Println("attempts:", api.AttemptsFor(key), "executions:", api.ExecutionsFor(key),
		"by reference:", api.ExecutionsByReference("order-7"))
	s := api.Stats()
	fmt.Println("requests:", s.Requests, "status checks:", s.KeyStatusChecks,
		"faults:", s.Faults[idemtest.Fault503], s.Faults[idemtest.FaultDropAfterCommit])
	// Output:
	// error: <nil>
	// attempts: 2 executions: 1 by reference: 1
	// requests: 2 status checks: 1 faults: 1 1
}
