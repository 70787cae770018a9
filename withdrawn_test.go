package idem

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
)

// A Create that reported an error withdraws the record (TestCreateErrorWithdrawsTheRecord),
// and Do says that nothing was sent and the call may be retried. Retried for the same intent,
// the withdrawn record used to answer ErrNotExecuted for ever: the intent (often the order's
// reference) could never be paid (adversarial run). It is sent now, under its own key: the
// intent binds that key, so no other key can have paid the intent meanwhile. A Recover
// afterwards sends nothing more.
func TestWithdrawnIntentIsSentWhenRetried(t *testing.T) {
	for _, fail := range []createFailure{createCommittedLost, createLost} {
		t.Run(map[createFailure]string{createCommittedLost: "committed", createLost: "not committed"}[fail], func(t *testing.T) {
			a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, _ int64) { a.charge(w, key, ref) })
			store := &slowStore{Memory: keystore.NewMemory(), failCreate: fail}
			c, clk := ledgerClient(t, a, func(cfg *Config) { cfg.Store = store })
			op := payment(1, "order-w", WithIntent("order-w"))
			_, err := c.Do(context.Background(), op)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.NotContains(t, err.Error(), "could not be withdrawn")
			require.EqualValues(t, 0, a.posts.Load())

			// Retried as told, with a new Operation of the same intent (a restarted process).
			res, err := c.Do(context.Background(), payment(1, "order-w", WithIntent("order-w")))
			require.NoError(t, err)
			assert.Equal(t, http.StatusCreated, res.StatusCode)
			assert.Equal(t, op.Key(), res.Key, "the withdrawn record's key")
			assert.Equal(t, 1, res.Attempts)
			assert.Equal(t, 1, a.charges("order-w"))
			rec, err := store.Memory.Get(context.Background(), "", op.Key())
			require.NoError(t, err)
			assert.Equal(t, keystore.StateSucceeded, rec.State)
			assert.Empty(t, rec.Note)

			// Again: the stored outcome; and Recover past the lease sends nothing.
			res, err = c.Do(context.Background(), op)
			require.NoError(t, err)
			assert.Equal(t, SourceStore, res.Source)
			clk.Advance(DefaultLeaseTTL + time.Second)
			_, err = c.Recover(context.Background(), nil)
			require.NoError(t, err)
			assert.EqualValues(t, 1, a.posts.Load())
			assert.Equal(t, 1, a.charges("order-w"))
		})
	}
}
