package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
)

// A child's lookup of a stored 5xx was inconclusive (the 150 ms search timed out under
// load); nothing was pending at the end, so the final reconciliation never ran Recover, the
// lookup was never asked again, and the run reported the payment as needing reconciliation
// and exited 1 though the search would now find the charge (adversarial run). The final
// reconciliation runs Recover at least once.
func TestFinalStateAsksTheLookupAboutManualRecords(t *testing.T) {
	srv := idemtest.NewServer(idemtest.Config{})
	defer srv.Close()
	spec := storeSpec{Path: filepath.Join(t.TempDir(), "keys.db")}
	ctx := context.Background()

	// The payment is charged; its key is manual (a stored 500) with no verdict yet.
	body := []byte(`{"amount":100,"currency":"EUR","customer":"cus_1","reference":"pay-1"}`)
	op := idem.NewOperation(http.MethodPost, paymentsPath, body, idem.WithIntent("pay-1"))
	req, err := http.NewRequest(http.MethodPost, srv.URL+paymentsPath, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", op.Key())
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	st, closeStore, err := spec.open(ctx)
	require.NoError(t, err)
	now := time.Now()
	require.NoError(t, st.Create(ctx, &keystore.Record{Scope: tenant, Key: op.Key(), Intent: "pay-1",
		Fingerprint: idem.Fingerprint(http.MethodPost, srv.URL+paymentsPath, body), State: keystore.StateManual,
		Reason: keystore.ReasonStoredServerError, LastStatusCode: 500, CreatedAt: now, UpdatedAt: now,
		Request: keystore.Request{Method: http.MethodPost, URL: paymentsPath, Body: body}}))
	closeStore()

	recs, _, _, err := finalState(ctx, spec, nil, srv.URL, idemAPI("/v1/payments?reference={reference}"), 4)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.Equal(t, keystore.StateSucceeded, recs[0].State, "the final reconciliation never asked the lookup")
}

// A stored 500 without a charge, settled as not executed by the final reconciliation's
// lookup, left its payment unpaid: counted among the 4xx failures, the run exiting 0
// (adversarial run). The final reconciliation pays it under a new intent, as a child would:
// one charge for the reference, the last record succeeded.
func TestFinalStatePaysWhatTheLookupFoundUnpaid(t *testing.T) {
	srv := idemtest.NewServer(idemtest.Config{})
	defer srv.Close()
	spec := storeSpec{Path: filepath.Join(t.TempDir(), "keys.db")}
	ctx := context.Background()
	p := payment{Index: 7, Amount: 1250, Currency: "EUR", Customer: "cus_1"}

	// A child without a usable lookup: the stored 500 leaves the record manual.
	srv.Script(idemtest.FaultStored500) // executed as a failure: a 500 stored, nothing charged
	st, closeStore, err := spec.open(ctx)
	require.NoError(t, err)
	child, err := newClient(srv.URL, idemAPI(""), st, 4, false)
	require.NoError(t, err)
	_, err = child.Do(ctx, idem.NewOperation(http.MethodPost, paymentsPath, p.body(), idem.WithIntent(intentName(p.Index, 1))))
	require.ErrorIs(t, err, idem.ErrStoredServerError)
	require.NoError(t, child.Close())
	closeStore()

	recs, _, _, err := finalState(ctx, spec, []payment{p}, srv.URL, idemAPI("/v1/payments?reference={reference}"), 4)
	require.NoError(t, err)
	rs := byPayment(recs)[p.Index]
	require.Len(t, rs, 2, "a new intent")
	assert.Equal(t, keystore.ReasonNotExecuted, rs[0].Reason)
	assert.Equal(t, keystore.StateSucceeded, rs[1].State)
	assert.Equal(t, 1, srv.Handler.ExecutionsByReference(p.ref()))
}

// A sender restarted during a PostgreSQL blip failed to open the store or to Recover and
// aborted the whole run (adversarial run): with a PostgreSQL keystore both are tried again
// while they fail; a bbolt file's errors do not pass with time, so they are tried once.
func TestStartupRetry(t *testing.T) {
	failTwice := func(calls *int) func() error {
		return func() error {
			*calls++
			if *calls <= 2 {
				return errors.New("connection reset by peer")
			}
			return nil
		}
	}
	var pg, bolt int
	require.NoError(t, startupRetry(storeSpec{DSN: "postgres://x"}, failTwice(&pg)))
	assert.Equal(t, 3, pg)
	require.Error(t, startupRetry(storeSpec{Path: "keys.db"}, failTwice(&bolt)))
	assert.Equal(t, 1, bolt)
}

// idemAPI is the idem dialect with the default status endpoint and lookupPath ("" for none).
func idemAPI(lookupPath string) apiSpec {
	return apiSpec{Dialect: "idem", StatusPath: "/v1/payments/operations/{key}", LookupPath: lookupPath}
}
