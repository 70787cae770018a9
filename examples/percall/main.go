// Command percall shows per-call policies: one idem client, three calls that each make a
// different promise to their caller.
//
//  1. checkout: the user is waiting, so one attempt and an answer now (CallMaxAttempts(1)).
//     The server says 503; idem stops at once instead of retrying, and the record stays
//     pending, so the same intent can be finished later.
//  2. payment: five attempts and the status endpoint (CallKeyStatusURL). The server commits the
//     payment and drops the connection; idem asks the status endpoint instead of resending.
//  3. payout: a background job with a long budget (CallMaxElapsed(2*time.Minute), more
//     attempts). The server throttles it three times; idem waits as asked each time.
//
// It runs against an in-process idemtest server with scripted faults:
//
//	go run ./examples/percall
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/event"
	"github.com/idemkit/idem/idemtest"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "percall:", err)
		os.Exit(1)
	}
}

// call is one call of the demo: the faults the server injects into its requests and the
// per-call options it runs with.
type call struct {
	title, intent, body string
	faults              []idemtest.Fault
	opts                []idem.CallOption
}

func run(w io.Writer) error {
	srv := idemtest.NewServer(idemtest.Config{RetryAfter: 1}) // 503 and 429 ask for 1s
	defer srv.Close()

	// Hooks run synchronously on the calling goroutine, and the calls run one after the
	// other, so printing from them keeps the story in order.
	hooks := event.Hooks{
		OnAttempt: func(e event.Attempt) {
			what := fmt.Sprintf("HTTP %d", e.StatusCode)
			if e.Err != nil {
				what = "transport error after the request was written"
			}
			fmt.Fprintf(w, "     attempt %d: %s (class %s)\n", e.Attempt, what, e.Class)
		},
		OnRetry: func(e event.Retry) {
			why := "backoff"
			if e.RetryAfter {
				why = "the server's Retry-After"
			}
			fmt.Fprintf(w, "     wait %s (%s), same key\n", e.Delay, why)
		},
		OnKeyStatusCheck: func(e event.KeyStatusCheck) {
			fmt.Fprintf(w, "     status endpoint: %s\n", e.State)
		},
	}
	// The client's defaults are deliberately plain; each call below narrows or widens them.
	// No default status endpoint: only the call that asks for one uses it.
	client, err := idem.NewClient(idem.Config{
		BaseURL: srv.URL,
		Hooks:   hooks,
		Credentials: func(r *http.Request) error {
			r.Header.Set("Authorization", "Bearer sk_demo")
			return nil
		},
	})
	if err != nil {
		return err
	}

	calls := []call{{
		title:  "checkout: the user is waiting, one attempt only",
		intent: "order-1", body: `{"amount":1999,"currency":"EUR","customer":"cus_1","reference":"order-1"}`,
		faults: []idemtest.Fault{idemtest.Fault503},
		opts:   []idem.CallOption{idem.CallMaxAttempts(1), idem.CallAttemptTimeout(2 * time.Second)},
	}, {
		title:  "payment: 5 attempts, status endpoint on an unknown outcome",
		intent: "order-2", body: `{"amount":4500,"currency":"EUR","customer":"cus_2","reference":"order-2"}`,
		faults: []idemtest.Fault{idemtest.FaultDropAfterCommit},
		opts:   []idem.CallOption{idem.CallMaxAttempts(5), idem.CallKeyStatusURL("/v1/payments/operations/{key}")},
	}, {
		title:  "payout: background job, 2 minutes and 10 attempts to get through",
		intent: "payout-3", body: `{"amount":250000,"currency":"EUR","customer":"cus_3","reference":"payout-3"}`,
		faults: []idemtest.Fault{idemtest.Fault503, idemtest.Fault429, idemtest.Fault503},
		opts:   []idem.CallOption{idem.CallMaxElapsed(2 * time.Minute), idem.CallMaxAttempts(10)},
	}}

	ctx := context.Background()
	for i, c := range calls {
		fmt.Fprintf(w, "%d. %s\n", i+1, c.title)
		srv.Script(c.faults...)
		op := idem.NewOperation(http.MethodPost, idemtest.PaymentsPath, []byte(c.body), idem.WithIntent(c.intent))
		start := time.Now()
		res, err := client.Do(ctx, op, c.opts...)
		report(w, c.intent, res, err, time.Since(start))
	}

	// The checkout stopped with its record pending. The same intent, later, with the
	// client's defaults, continues with the key persisted the first time.
	fmt.Fprintln(w, "4. later: checkout order-1 again, client defaults")
	op := idem.NewOperation(http.MethodPost, idemtest.PaymentsPath, []byte(calls[0].body), idem.WithIntent("order-1"))
	start := time.Now()
	res, err := client.Do(ctx, op)
	report(w, "order-1", res, err, time.Since(start))

	for _, c := range calls {
		fmt.Fprintf(w, "ledger: %s executed %d time(s)\n", c.intent, srv.ExecutionsByReference(c.intent))
	}
	return nil
}

// report prints what one call ended with.
func report(w io.Writer, intent string, res *idem.Result, err error, took time.Duration) {
	var oe *idem.OperationError
	switch {
	case err == nil:
		fmt.Fprintf(w, "   => %s succeeded: HTTP %d, source %s, %d attempt(s), %d status check(s), %s\n",
			intent, res.StatusCode, res.Source, res.Attempts, res.KeyStatusChecks, took.Round(time.Millisecond))
	case errors.As(err, &oe):
		state := "failed"
		if !errors.Is(err, idem.ErrPermanent) && !errors.Is(err, idem.ErrKeyConflict) {
			state = "still pending (the same intent, or Recover, finishes it later)"
		}
		fmt.Fprintf(w, "   => %s stopped after %d attempt(s), last status %d, %s: %v; record %s\n",
			intent, oe.Attempts, oe.LastStatusCode, took.Round(time.Millisecond), oe.Kind, state)
	default:
		fmt.Fprintf(w, "   => %s: %v\n", intent, err)
	}
}
