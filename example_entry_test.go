package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/event"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore/boltstore"
	"github.com/idemkit/idem/outcome"
)

// A client with a durable keystore: the record of every payment is in the bbolt file before
// the first byte is sent, and its outcome is there when Do returns.
func ExampleNewClient() {
	api := idemtest.NewServer(idemtest.Config{})
	defer api.Close()
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)

	store, err := boltstore.Open(filepath.Join(dir, "idem.db"), nil) // in real use: a path that survives restarts
	if err != nil {
		panic(err)
	}
	defer store.Close()
	c, err := idem.NewClient(idem.Config{
		BaseURL:      api.URL,
		Store:        store,
		KeyStatusURL: "/v1/payments/operations/{key}",
		Credentials:  func(r *http.Request) error { r.Header.Set("Authorization", "Bearer sk_test"); return nil },
	})
	if err != nil {
		panic(err)
	}
	op := idem.NewOperation(http.MethodPost, "/v1/payments",
		[]byte(`{"amount":1250,"currency":"EUR","customer":"cus_42"}`), idem.WithIntent("order-42"))
	res, err := c.Do(context.Background(), op)
	if err != nil {
		panic(err)
	}
	rec, _ := store.GetByIntent(context.Background(), "", "order-42")
	fmt.Println(res.StatusCode, rec.State, rec.Key == res.Key, rec.Request.Header.Get("Authorization") == "")
	// Output: 201 succeeded true true
}

// Per-call options override the client's policy for one call. A call that runs out of
// attempts leaves its record pending; the same operation again continues the same key.
func ExampleCallMaxAttempts() {
	api := idemtest.NewServer(idemtest.Config{RetryAfter: -1}) // 503s ask for Retry-After: 0
	defer api.Close()
	api.Script(idemtest.Fault503, idemtest.Fault503)
	c, _ := idem.NewClient(idem.Config{BaseURL: api.URL, KeyStatusURL: "/v1/payments/operations/{key}"})

	op := idem.NewOperation(http.MethodPost, "/v1/payments", []byte(`{"amount":500,"currency":"EUR","customer":"c"}`))
	_, err := c.Do(context.Background(), op, idem.CallMaxAttempts(2))
	fmt.Println(errors.Is(err, idem.ErrExhausted), api.AttemptsFor(op.Key()))

	res, err := c.Do(context.Background(), op, idem.CallMaxAttempts(3), idem.CallMaxRetryAfter(0))
	fmt.Println(res.StatusCode, err, api.AttemptsFor(op.Key()), api.ExecutionsFor(op.Key()))
	// Output:
	// true 2
	// 201 <nil> 3 1
}

// Hooks see every retry decision and status check, synchronously and in order.
func ExampleConfig_hooks() {
	api := idemtest.NewServer(idemtest.Config{RetryAfter: -1})
	defer api.Close()
	api.Script(idemtest.Fault503, idemtest.FaultDropAfterCommit)
	c, _ := idem.NewClient(idem.Config{
		BaseURL:      api.URL,
		KeyStatusURL: "/v1/payments/operations/{key}",
		Hooks: event.Hooks{
			OnAttempt:        func(e event.Attempt) { fmt.Println("attempt", e.Attempt, e.StatusCode, e.Class) },
			OnUnknown:        func(e event.Unknown) { fmt.Println("outcome unknown after attempt", e.Attempt) },
			OnKeyStatusCheck: func(e event.KeyStatusCheck) { fmt.Println("status check:", e.State) },
		},
	})
	res, err := c.Do(context.Background(), idem.NewOperation(http.MethodPost, "/v1/payments",
		[]byte(`{"amount":700,"currency":"EUR","customer":"c"}`)))
	fmt.Println(res.StatusCode, res.Source, err)
	// Output:
	// attempt 1 503 retry
	// attempt 2 0 unknown
	// outcome unknown after attempt 2
	// status check: completed
	// 201 status <nil>
}

// Any code that takes an *http.Client runs over idem: POST gets a persisted key, retries
// with it, and a status check instead of a second charge when an answer is lost.
func ExampleNewHTTPClient() {
	api := idemtest.NewServer(idemtest.Config{})
	defer api.Close()
	api.Script(idemtest.FaultDropAfterCommit)
	// BaseURL resolves the relative KeyStatusURL; requests through the client carry full URLs.
	c, _ := idem.NewClient(idem.Config{BaseURL: api.URL, KeyStatusURL: "/v1/payments/operations/{key}"})
	hc := idem.NewHTTPClient(c) // give it to a generated client: WithHTTPClient(hc)

	ctx := idem.ContextWithIntent(context.Background(), "order-42") // optional: binds retries across restarts
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, api.URL+"/v1/payments",
		strings.NewReader(`{"amount":1250,"currency":"EUR","customer":"cus_42","reference":"order-42"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		panic(err) // errors.As(err, new(*idem.OperationError)) says why
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status, strings.Contains(string(body), `"reference":"order-42"`), api.ExecutionsByReference("order-42"))
	// Output: 201 Created true 1
}

// A 4xx is a response, as net/http returns it; an unknown outcome is an error.
func ExampleTransport() {
	api := idemtest.NewServer(idemtest.Config{})
	defer api.Close()
	c, _ := idem.NewClient(idem.Config{}) // no status endpoint
	hc := &http.Client{Transport: &idem.Transport{Client: c, MaxBodySize: 64 << 10}}

	resp, err := hc.Post(api.URL+"/v1/payments", "application/json", strings.NewReader(`{"amount":0,"currency":"EUR","customer":"c"}`))
	if err == nil {
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
	}

	api.Script(idemtest.FaultDropAfterCommit)
	ctx := idem.ContextWithCallOptions(context.Background(), idem.CallMaxAttempts(1))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, api.URL+"/v1/payments",
		strings.NewReader(`{"amount":10,"currency":"EUR","customer":"c"}`))
	_, err = hc.Do(req)
	var oe *idem.OperationError
	fmt.Println(errors.Is(err, idem.ErrOutcomeUnknown), errors.As(err, &oe) && oe.Attempts == 1)
	// Output:
	// 400
	// true true
}

// A classifier put in front of the defaults: this API answers 400 {"code":"try_again"} for a
// request it did not execute, so that answer is retried with the same key instead of
// failing. Every other answer falls through to outcome.DefaultClassifiers.
func ExampleConfig_classifiers() {
	var calls atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"code":"try_again"}`)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"pay_1"}`)
	}))
	defer api.Close()

	tryAgain := outcome.ClassifierFunc(func(a *outcome.Attempt) outcome.Class {
		if a.StatusCode() == http.StatusBadRequest && bytes.Contains(a.Body, []byte(`"try_again"`)) {
			return outcome.ClassRetry // not executed: resend with the same key
		}
		return outcome.ClassUndecided // let the next classifier decide
	})
	c, err := idem.NewClient(idem.Config{
		BaseURL:     api.URL,
		Classifiers: append(outcome.Classifiers{tryAgain}, outcome.DefaultClassifiers()...),
		Sleep:       func(context.Context, time.Duration) error { return nil }, // no backoff wait in the example
	})
	if err != nil {
		panic(err)
	}
	res, err := c.Do(context.Background(), idem.NewOperation(http.MethodPost, api.URL+"/v1/payments",
		[]byte(`{"amount":900,"currency":"EUR"}`)))
	fmt.Println(res.StatusCode, res.Attempts, err)
	// Output:
	// 201 2 <nil>
}
