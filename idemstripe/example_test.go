package idemstripe_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/stripe/stripe-go/v82"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstripe"
	"github.com/idemkit/idem/keystore"
)

// A PaymentIntent for an order, safe to call again for the same order: after a crash, after
// an unknown outcome, from another instance sharing the store.
func Example() {
	sc, err := idemstripe.New(idemstripe.Config{
		SecretKey: "sk_test_...", // stripe-go's key, and idem's credentials for Recover
		Idem: idem.Config{
			Store:  keystore.NewMemory(), // in real use: keystore/boltstore or keystore/pgstore
			Policy: idem.Policy{MaxAttempts: 4},
		},
		RedactFields: []string{"secret"}, // besides client_secret
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sc.Close()

	// After a restart: resend what the previous process left pending.
	_, _ = sc.Idem.Recover(context.Background(), nil)

	ctx := idemstripe.WithIntent(context.Background(), "order-42")
	pi, err := sc.V1PaymentIntents.Create(ctx, &stripe.PaymentIntentCreateParams{
		Amount:   stripe.Int64(1250),
		Currency: stripe.String(string(stripe.CurrencyEUR)),
	})
	var se *stripe.Error
	switch {
	case err == nil:
		fmt.Println("created", pi.ID, pi.Status)
	case errors.Is(err, idem.ErrOutcomeUnknown):
		fmt.Println("maybe created: call again with the same intent later")
	case errors.As(err, &se):
		fmt.Println("stripe said no:", se.Type, se.Msg)
	default:
		fmt.Println("not sent:", err)
	}
}
