package idem_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/profile"
)

// A provider that keeps nothing on error (Checkout.com): after a 500 that followed the
// charge, the same key would charge again. With its profile, idem searches by reference
// first, finds the charge and sends nothing more.
func ExampleConfig_profile() {
	api := idemtest.NewServer(idemtest.Config{Dialect: idemtest.DialectCheckout})
	defer api.Close()
	api.Script(idemtest.Fault500AfterCommit)

	secret := "sk_test_checkout"
	c, err := idem.NewClient(idem.Config{
		BaseURL: api.URL,
		Profile: profile.Checkout, // Cko-Idempotency-Key, 24 h, search before any resend
		Store:   keystore.NewMemory(),
		Credentials: func(r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+secret) // never persisted; Recover needs it
			return nil
		},
	})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	op := idem.NewOperation(http.MethodPost, idemtest.PaymentsPath,
		[]byte(`{"amount":1250,"currency":"EUR","customer":"cus_42","reference":"order-42"}`), idem.WithIntent("order-42"))
	res, err := c.Do(context.Background(), op)
	if err != nil {
		panic(err)
	}
	charged, _ := api.ChargesByReference("order-42")
	fmt.Println(res.Source, "attempts:", res.Attempts, "charges:", charged)
	// Output: lookup attempts: 1 charges: 1
}
