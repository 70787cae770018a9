package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/event"
	"github.com/idemkit/idem/keystore/boltstore"
)

// child does one job in its own process: "pay" (and be killed) or "recover".
func child(raw string, w io.Writer) error {
	var j job
	if err := json.Unmarshal([]byte(raw), &j); err != nil {
		return err
	}
	store, err := boltstore.Open(j.Store, nil)
	if err != nil {
		return err
	}
	defer store.Close()
	client, err := idem.NewClient(idem.Config{
		BaseURL:      j.BaseURL,
		Store:        store,
		KeyStatusURL: "/v1/payments/operations/{key}",
		// idem never writes credentials to disk: a restarted process must supply them.
		Credentials: func(r *http.Request) error {
			r.Header.Set("Authorization", "Bearer sk_demo")
			return nil
		},
		Hooks: event.Hooks{
			OnKeyStatusCheck: func(e event.KeyStatusCheck) {
				fmt.Fprintf(w, "status endpoint, key %s: %s\n", e.Key, e.State)
			},
		},
	})
	if err != nil {
		return err
	}
	ctx := context.Background()
	if j.Mode == "pay" {
		return pay(ctx, w, client)
	}
	return recoverAll(ctx, w, client)
}

// pay sends the payment and waits; the parent kills this process before it returns.
func pay(ctx context.Context, w io.Writer, client *idem.Client) error {
	op := idem.NewOperation(http.MethodPost, "/v1/payments", []byte(body), idem.WithIntent(intent))
	fmt.Fprintf(w, "Do(%s): persist key %s, then send\n", intent, op.Key())
	res, err := client.Do(ctx, op)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "unexpected: the payment finished (HTTP %d) before the kill\n", res.StatusCode)
	return nil
}

// recoverAll reconciles every pending record, then shows that the application's own retry
// of the intent is answered from the keystore without sending anything.
func recoverAll(ctx context.Context, w io.Writer, client *idem.Client) error {
	start := time.Now()
	rep, err := client.Recover(ctx, func(r idem.Reconciled) {
		// Here an application marks its order paid (or failed). Called once per record.
		if r.Err != nil {
			fmt.Fprintf(w, "reconciled %s (key %s): %v\n", r.Record.Intent, r.Record.Key, r.Err)
			return
		}
		fmt.Fprintf(w, "reconciled %s (key %s): succeeded, HTTP %d, source %s, body %s\n",
			r.Record.Intent, r.Record.Key, r.Result.StatusCode, r.Result.Source, r.Result.Body)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "Recover: %d pending record(s), %d succeeded, %d failed, %d still unknown, in %s\n",
		rep.Pending, rep.Succeeded, rep.Failed, rep.Unknown, time.Since(start).Round(time.Millisecond))

	op := idem.NewOperation(http.MethodPost, "/v1/payments", []byte(body), idem.WithIntent(intent))
	res, err := client.Do(ctx, op)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "the application retries Do(%s): source %s, %d request(s) sent\n",
		intent, res.Source, res.Attempts)
	return nil
}
