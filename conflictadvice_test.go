package idem

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
)

// A request refused with 400 (ErrPermanent) and corrected under the same intent is refused
// locally as key reuse: the error says the intent's request failed, was not paid, and that a
// corrected request is a new intent. It said only "bound to another request", which the quick
// start reads as "maybe paid: never pay again" (newcomer run).
func TestKeyConflictSaysWhatTheRecordBecame(t *testing.T) {
	a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, n int64) {
		if n == 1 {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		a.charge(w, key, ref)
	})
	c, _ := ledgerClient(t, a, nil)
	_, err := c.Do(context.Background(), payment(0, "order-fix", WithIntent("order-fix")))
	require.ErrorIs(t, err, ErrPermanent)
	_, err = c.Do(context.Background(), payment(5, "order-fix", WithIntent("order-fix")))
	require.ErrorIs(t, err, ErrKeyConflict)
	assert.Contains(t, err.Error(), "that request failed (HTTP 400, ErrPermanent: refused, not paid): a corrected request is a new intent")
	assert.EqualValues(t, 1, a.posts.Load())
	res, err := c.Do(context.Background(), payment(5, "order-fix", WithIntent("order-fix#2")))
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, res.StatusCode)
}

// A key the caller chose (an order id) was refused by the server with 422, bound there to
// another payload by another client; the same key with the other payload was then refused
// locally with "that request failed (HTTP 422, ErrPermanent: refused, not paid): a corrected
// request is a new intent", though the key holds a charge on the server (newcomer run). The
// advice names the key conflict and never tells to pay again.
func TestKeyConflictAdviceAfterAServer422(t *testing.T) {
	a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, n int64) {
		if n == 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnprocessableEntity) // bound to another payload, on the server
			_, _ = w.Write([]byte(`{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters they were first used with."}}`))
			return
		}
		a.charge(w, key, ref)
	})
	c, _ := ledgerClient(t, a, nil)
	_, err := c.Do(context.Background(), payment(9, "order-k", WithKey("order-k-key")))
	require.ErrorIs(t, err, ErrKeyConflict)
	_, err = c.Do(context.Background(), payment(5, "order-k", WithKey("order-k-key")))
	require.ErrorIs(t, err, ErrKeyConflict)
	assert.Contains(t, err.Error(), "bound there to another payload (ErrKeyConflict)")
	assert.Contains(t, err.Error(), "never pay again under a new intent")
	assert.NotContains(t, err.Error(), "not paid")
	assert.NotContains(t, err.Error(), "is a new intent")
	assert.EqualValues(t, 1, a.posts.Load())
}

// A record a lookup settled as not executed was described as "ErrPermanent: refused, not
// paid" (its NotExecuted flag is cleared by the verdict): the advice names the verdict.
func TestKeyConflictAdviceAfterANotExecutedVerdict(t *testing.T) {
	msg := conflictAdvice(&keystore.Record{State: keystore.StateFailed, Reason: keystore.ReasonNotExecuted, LastStatusCode: 500,
		Note: `lookup: no payment with reference "order-1"`})
	assert.Equal(t, `that request was settled as not executed (lookup: no payment with reference "order-1"): send this one as a new intent`, msg)
}
