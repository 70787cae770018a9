package idemtest_test

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/idemkit/idem/idemtest"
)

// A Checkout.com-dialect server caches only 2xx answers: after a 500 that followed the
// charge, a resend with the same key charges again. The ledger shows it.
func ExampleConfig_dialect() {
	if err := idemtest.ValidDialect("checkout"); err != nil { // a name from a flag
		panic(err)
	}
	api := idemtest.NewServer(idemtest.Config{Dialect: idemtest.DialectCheckout})
	defer api.Close()
	api.Script(idemtest.Fault500AfterCommit)

	send := func() int {
		req, _ := http.NewRequest(http.MethodPost, api.URL+idemtest.PaymentsPath,
			strings.NewReader(`{"amount":990,"currency":"EUR","customer":"cus_1","reference":"order-7"}`))
		req.Header.Set(idemtest.KeyCarrier(idemtest.DialectCheckout), "key-1") // Cko-Idempotency-Key
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	fmt.Println(send(), send())
	charged, canceled := api.ChargesByReference("order-7")
	fmt.Println("charged:", charged, "canceled:", canceled)
	// Output:
	// 500 201
	// charged: 2 canceled: 0
}
