package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore/boltstore"
)

// pay charges order 42 once, whatever fails on the way, and says what the application
// should do next.
func pay(ctx context.Context, baseURL, dbPath, apiKey string) (string, error) {
	store, err := boltstore.Open(dbPath, nil) // durable pending keys
	if err != nil {
		return "", err
	}
	defer store.Close()

	c, err := idem.NewClient(idem.Config{
		BaseURL:      baseURL,
		Store:        store,
		KeyStatusURL: "/v1/payments/operations/{key}",
		Credentials:  func(r *http.Request) error { r.Header.Set("Authorization", "Bearer "+apiKey); return nil },
	})
	if err != nil {
		return "", err
	}
	defer c.Close() // stops the background purge and lease renewals

	// After a restart: finish what a crash interrupted. (A service calls Recover once at
	// start-up, not before every payment: it reads every pending record, and may wait a few
	// seconds on keys the API still reports as processing; run it on its own goroutine if
	// start-up must not wait.)
	if _, err := c.Recover(ctx, func(r idem.Reconciled) { markOrder(r.Record.Intent, r.Result, r.Err) }); err != nil {
		return "", err // the keystore could not be read
	}

	body := []byte(`{"amount":1250,"currency":"EUR","customer":"cus_42","reference":"order-42"}`)
	op := idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent("order-42"))
	res, err := c.Do(ctx, op, idem.CallMaxAttempts(5)) // policy per call
	switch {
	case err == nil: // paid: res.StatusCode, res.Body (res.Source says from where)
		markOrder("order-42", res, nil)
		return "paid", nil
	case errors.Is(err, idem.ErrStoredServerError), errors.Is(err, idem.ErrKeyExpired):
		// The key can tell no more (the server stored a 5xx for it, or it is older than the
		// server keeps keys): maybe paid. Never pay again here, and Do again only returns this
		// error. The record is manual; Config.Lookup or Client.Resolve settles it.
		return "reconcile", err
	case errors.Is(err, idem.ErrLeaseLost):
		// Another instance of a fleet took the record over and finishes it. Never pay again
		// here: a later Do of "order-42" waits for that instance, then returns the outcome.
		return "taken over", err
	case errors.Is(err, idem.ErrOutcomeUnknown): // maybe paid: the record stays pending; Recover or Do again
		return "unknown", err
	case errors.Is(err, idem.ErrNotExecuted):
		// Settled as not executed: only now may this order be paid again, as a new intent:
		// idem.NewOperation(..., idem.WithIntent("order-42#2")).
		return "pay again", err
	case errors.Is(err, idem.ErrPermanent): // declined / invalid (4xx, any 422 that is not key reuse): never retried
		return "declined", err
	case errors.Is(err, idem.ErrKeyConflict): // the intent's key holds other bytes; the error says what became of them:
		// failed (a 4xx) or not executed: a corrected request is a new intent; else never pay again
		return "bug", err
	default: // not executed yet (exhausted, throttled, deadline, budget, canceled):
		// the record stays pending; Do again later or let Recover finish it
		return "later", err
	}
}

// markOrder is where the application records a payment's outcome (here, a line on stdout).
func markOrder(order string, res *idem.Result, err error) {
	switch {
	case err == nil:
		// res.Source: "response" first; "store" when the keystore already held the answer.
		fmt.Printf("order %s: paid, HTTP %d %s (%s)\n", order, res.StatusCode, res.Body, res.Source)
	case errors.Is(err, idem.ErrPermanent), errors.Is(err, idem.ErrNotExecuted):
		fmt.Printf("order %s: not paid: %v\n", order, err) // declined, or settled as never executed
	default:
		fmt.Printf("order %s: not settled yet: %v\n", order, err) // pending, unknown or manual
	}
}
