package main

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
)

// TestCheckLedgerCatchesDuplicatesAndLosses feeds the cross-check a ledger and records that
// disagree, as a broken client would leave them, so that its zeros in a run mean something.
func TestCheckLedgerCatchesDuplicatesAndLosses(t *testing.T) {
	srv := idemtest.NewServer(idemtest.Config{})
	defer srv.Close()
	payments := generate(7, 1)
	post := func(p payment, key string) []byte {
		req, err := http.NewRequest(http.MethodPost, srv.URL+paymentsPath, bytes.NewReader(p.body()))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Authorization", "Bearer "+apiKey)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return b
	}
	rec := func(p payment, try int, key string, state keystore.State, answer []byte) *keystore.Record {
		r := &keystore.Record{Scope: tenant, Key: key, Intent: intentName(p.Index, try), State: state}
		if answer != nil {
			r.Response = &keystore.Response{StatusCode: http.StatusCreated, Body: answer}
		}
		return r
	}
	for i := range payments { // all valid, so that every POST executes
		payments[i].Invalid, payments[i].Amount = false, 1000
	}
	var recs []*keystore.Record
	// pay-0: executed once, recorded succeeded: fine.
	recs = append(recs, rec(payments[0], 1, "k0", keystore.StateSucceeded, post(payments[0], "k0")))
	// pay-1: executed under two keys, one recorded: a duplicate, and an unrecorded execution.
	recs = append(recs, rec(payments[1], 1, "k1", keystore.StateSucceeded, post(payments[1], "k1")))
	post(payments[1], "k1-again")
	// pay-2: recorded succeeded, never executed.
	recs = append(recs, rec(payments[2], 1, "k2", keystore.StateSucceeded, []byte(`{"id":"pay_999"}`)))
	// pay-3: still pending.
	recs = append(recs, rec(payments[3], 1, "k3", keystore.StatePending, nil))
	// pay-4: a stored 5xx on the first key settled as not executed by the lookup, then
	// succeeded with a new key: fine.
	k4 := rec(payments[4], 1, "k4", keystore.StateFailed, nil)
	k4.Reason, k4.LastStatusCode, k4.Note = keystore.ReasonNotExecuted, 500, "lookup: no payment"
	recs = append(recs, k4, rec(payments[4], 2, "k4b", keystore.StateSucceeded, post(payments[4], "k4b")))
	// pay-5: executed, but recorded failed.
	post(payments[5], "k5")
	recs = append(recs, rec(payments[5], 1, "k5", keystore.StateFailed, nil))
	// pay-6: executed, then the key stored a 5xx nobody settled: needs reconciliation, the
	// execution is not a loss and nothing was paid again.
	post(payments[6], "k6")
	k6 := rec(payments[6], 1, "k6", keystore.StateManual, nil)
	k6.Reason, k6.LastStatusCode = keystore.ReasonStoredServerError, 500
	recs = append(recs, k6)

	v := checkLedger(payments, recs, srv)
	assert.Equal(t, []string{"pay-1: executed 2 times"}, v.Duplicates)
	lost := strings.Join(v.Lost, "\n")
	assert.Len(t, v.Lost, 3, lost)
	for _, want := range []string{
		"pay-1: key k1-again executed as",
		"pay-2: key k2 recorded succeeded, never executed",
		"pay-5: key k5 executed as",
	} {
		assert.Contains(t, lost, want)
	}
	// pay-3, left pending with an unknown outcome and no charge, was never told succeeded:
	// not lost, but it needs reconciliation (as pay-6, manual, does).
	assert.Equal(t, []string{
		"pay-3: key k3 pending, outcome unknown () (ledger: 0 charges, 0 canceled)",
		"pay-6: key k6 manual (stored_server_error) (ledger: 1 charges, 0 canceled)",
	}, v.Unsettled)
	assert.Equal(t, 4, v.Succeeded)
	assert.Equal(t, 1, v.Failed)
	assert.Equal(t, 1, v.Pending)
	assert.Equal(t, 1, v.NewIntents)
	assert.Equal(t, 4, v.ExecutedOnce) // pay-0, pay-4, pay-5 and pay-6, by the ledger
	assert.Equal(t, 2, v.StoredErrors)
	assert.Equal(t, 1, v.ReconciledByLookup)
	assert.Equal(t, 2, v.NeedsReconciliation)
	assert.Equal(t, 1, v.UnknownPending)
}

// TestNotExecutedIsNotLost: a pending record the client knows was never executed is not a
// loss, unless the ledger says the key was executed after all; one whose outcome is unknown
// needs reconciliation.
func TestNotExecutedIsNotLost(t *testing.T) {
	srv := idemtest.NewServer(idemtest.Config{})
	defer srv.Close()
	payments := generate(3, 1)
	for i := range payments {
		payments[i].Invalid, payments[i].Amount = false, 1000
	}
	req, err := http.NewRequest(http.MethodPost, srv.URL+paymentsPath, bytes.NewReader(payments[1].body()))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "k1")
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()

	pending := func(p payment, key string, notExecuted bool) *keystore.Record {
		return &keystore.Record{Scope: tenant, Key: key, Intent: intentName(p.Index, 1),
			State: keystore.StatePending, NotExecuted: notExecuted, Reason: "exhausted"}
	}
	recs := []*keystore.Record{
		pending(payments[0], "k0", true),  // never executed: not lost
		pending(payments[1], "k1", true),  // "never executed", but the ledger executed it: lost
		pending(payments[2], "k2", false), // may have executed, never told succeeded: needs reconciliation
	}
	v := checkLedger(payments, recs, srv)
	assert.Equal(t, []string{"pay-0: key k0 never executed (exhausted)"}, v.NotExecuted)
	assert.Equal(t, 1, v.Unanswered)
	assert.Equal(t, 2, v.Pending)
	lost := strings.Join(v.Lost, "\n")
	require.Len(t, v.Lost, 1, lost)
	assert.Contains(t, lost, `pay-1: no final state ("pending"), recorded as never executed; key k1 executed as`)
	assert.Equal(t, []string{"pay-2: key k2 pending, outcome unknown (exhausted) (ledger: 0 charges, 0 canceled)"}, v.Unsettled)
	assert.Equal(t, 1, v.NeedsReconciliation)
	assert.Empty(t, v.Duplicates)
}
