package idem_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
)

// A payment whose answer is lost after the server committed it: idem asks the status endpoint
// with the same key instead of paying twice.
func ExampleClient_Do() {
	api := idemtest.NewServer(idemtest.Config{})
	defer api.Close()
	api.Script(idemtest.FaultDropAfterCommit)

	c, err := idem.NewClient(idem.Config{
		BaseURL:      api.URL,
		Store:        keystore.NewMemory(), // use keystore/boltstore to survive restarts
		KeyStatusURL: "/v1/payments/operations/{key}",
	})
	if err != nil {
		panic(err)
	}
	op := idem.NewOperation(http.MethodPost, "/v1/payments",
		[]byte(`{"amount":1250,"currency":"EUR","customer":"cus_42"}`), idem.WithIntent("order-42"))
	res, err := c.Do(context.Background(), op, idem.CallMaxAttempts(5))
	if err != nil {
		panic(err)
	}
	fmt.Println(res.StatusCode, res.Source, "attempts:", res.Attempts, "executions:", api.ExecutionsFor(res.Key))
	// Output: 201 status attempts: 1 executions: 1
}

// Errors say whether the outcome is known: a validation error is final and never retried.
func ExampleOperationError() {
	api := idemtest.NewServer(idemtest.Config{})
	defer api.Close()
	c, _ := idem.NewClient(idem.Config{BaseURL: api.URL})

	op := idem.NewOperation(http.MethodPost, "/v1/payments", []byte(`{"amount":0,"currency":"EUR","customer":"c"}`))
	_, err := c.Do(context.Background(), op)
	var oe *idem.OperationError
	if errors.As(err, &oe) {
		fmt.Println(errors.Is(err, idem.ErrPermanent), errors.Is(err, idem.ErrOutcomeUnknown), oe.Attempts, oe.LastStatusCode)
	}
	// Output: true false 1 400
}

// After a restart, Recover reconciles every record a crashed process left pending.
func ExampleClient_Recover() {
	api := idemtest.NewServer(idemtest.Config{})
	defer api.Close()
	store := keystore.NewMemory() // in real use: boltstore.Open on the same file as before

	// What a crashed process left behind: a persisted key that was never sent.
	body := []byte(`{"amount":990,"currency":"EUR","customer":"cus_7"}`)
	now := time.Now()
	_ = store.Create(context.Background(), &keystore.Record{
		Key: "5f0c3a47-3c5e-4d43-9d5b-0d4f6c2f9a11", Intent: "order-7", State: keystore.StatePending,
		Fingerprint: idem.Fingerprint(http.MethodPost, "/v1/payments", body),
		Request:     keystore.Request{Method: http.MethodPost, URL: "/v1/payments", Body: body},
		CreatedAt:   now, UpdatedAt: now,
	})

	c, _ := idem.NewClient(idem.Config{BaseURL: api.URL, Store: store, KeyStatusURL: "/v1/payments/operations/{key}"})
	rep, err := c.Recover(context.Background(), func(r idem.Reconciled) {
		if r.Err == nil {
			fmt.Println("intent", r.Record.Intent, "->", r.Record.State, r.Result.StatusCode)
		}
	})
	fmt.Println(rep.Pending, rep.Succeeded, err)
	// Output:
	// intent order-7 -> succeeded 201
	// 1 1 <nil>
}

// A stored 500 is an unknown outcome: the search by reference settles it, and only a
// "not executed" verdict lets the application pay the order again, under a new intent.
func ExampleLookupByReference() {
	api := idemtest.NewServer(idemtest.Config{})
	defer api.Close()
	api.Script(idemtest.FaultStored500) // the server stores a 500 for the first key, charging nothing

	lookup, _ := idem.LookupByReference("/v1/payments?reference={reference}", "reference")
	c, _ := idem.NewClient(idem.Config{BaseURL: api.URL, KeyStatusURL: "/v1/payments/operations/{key}", Lookup: lookup})
	body := []byte(`{"amount":990,"currency":"EUR","customer":"cus_7","reference":"order-7"}`)

	ctx := context.Background()
	_, err := c.Do(ctx, idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent("order-7")))
	fmt.Println(errors.Is(err, idem.ErrNotExecuted))
	if errors.Is(err, idem.ErrNotExecuted) { // only now: a new intent, hence a new key
		res, err := c.Do(ctx, idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent("order-7#2")))
		fmt.Println(res.StatusCode, err)
	}
	fmt.Println("charges for order-7:", api.ExecutionsByReference("order-7"))
	// Output:
	// true
	// 201 <nil>
	// charges for order-7: 1
}

// An operator settles a record that no lookup could: Resolve persists the verdict and its
// note, and Do of the same intent answers from it.
func ExampleClient_Resolve() {
	api := idemtest.NewServer(idemtest.Config{})
	defer api.Close()
	api.Script(idemtest.FaultStored500AfterCharge)
	c, _ := idem.NewClient(idem.Config{BaseURL: api.URL, KeyStatusURL: "/v1/payments/operations/{key}"})
	body := []byte(`{"amount":990,"currency":"EUR","customer":"cus_7","reference":"order-8"}`)
	op := idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent("order-8"))

	ctx := context.Background()
	_, err := c.Do(ctx, op)
	var oe *idem.OperationError
	if errors.As(err, &oe) && errors.Is(err, idem.ErrStoredServerError) {
		fmt.Println("stored", oe.Response.StatusCode, "unknown:", errors.Is(err, idem.ErrOutcomeUnknown))
		rec, _ := c.Resolve(ctx, oe.Scope, oe.Key, idem.Resolution{Verdict: idem.VerdictExecuted,
			Note:     "ops #12: charge pay_1 found in the dashboard",
			Response: &keystore.Response{StatusCode: 201, Body: []byte(`{"id":"pay_1"}`)}})
		fmt.Println(rec.State, rec.Note)
	}
	res, _ := c.Do(ctx, op)
	fmt.Println(res.Source, string(res.Body))
	// Output:
	// stored 500 unknown: true
	// succeeded ops #12: charge pay_1 found in the dashboard
	// store {"id":"pay_1"}
}
