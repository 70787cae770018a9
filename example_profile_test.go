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

// A profile's settling routes carry the simulator's paths (idemtest, the demo): against a
// provider's real API, copy the profile and set each route's path to that API's endpoint.
// The path below follows Stripe's documented search of PaymentIntents by metadata; it is not
// exercised against Stripe here. A search route must answer {"data": [...]}, as Stripe's
// does (idem.LookupByReference says how the list is read).
func ExampleConfig_profileRoutePath() {
	p := profile.Stripe.Clone()
	for i := range p.Settle {
		if p.Settle[i].Kind == profile.SearchByReference {
			p.Settle[i].Path = "/v1/payment_intents/search?query=metadata['reference']:'{reference}'" // keep {reference}
		}
	}
	if err := p.Validate(); err != nil { // a path without its placeholder is refused
		panic(err)
	}
	c, err := idem.NewClient(idem.Config{BaseURL: "https://api.stripe.com", Profile: p, Store: keystore.NewMemory()})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	search, _ := p.Route(profile.SearchByReference)
	shipped, _ := profile.Stripe.Route(profile.SearchByReference) // the package's value is untouched
	fmt.Println(search.Path)
	fmt.Println(shipped.Path)
	// Output:
	// /v1/payment_intents/search?query=metadata['reference']:'{reference}'
	// /v1/payments/search?query=metadata['reference']:'{reference}'
}
