package idem

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
