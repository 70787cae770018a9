package idem

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
)

// A pending record whose stored body was damaged on disk but still decodes no longer hashes
// to its fingerprint: neither Recover nor a Do of the same operation sends it (it would be
// another payment under the key). The record goes manual for a person to look at.
func TestDamagedStoredRequestIsNeverSent(t *testing.T) {
	for _, via := range []string{"Recover", "Do"} {
		t.Run(via, func(t *testing.T) {
			var posts atomic.Int32
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if posts.Add(1) == 1 { // the first attempt's answer is lost: the record stays pending
					conn, _, _ := w.(http.Hijacker).Hijack()
					_ = conn.Close()
					return
				}
				w.WriteHeader(http.StatusCreated)
			})
			c, _, store := scriptedClient(t, h, nil)
			ctx := context.Background()
			op := payment(1250, "bitrot")
			_, err := c.Do(ctx, op, CallMaxAttempts(1))
			require.ErrorIs(t, err, ErrOutcomeUnknown)
			rec, err := store.Get(ctx, "", op.Key())
			require.NoError(t, err)
			require.Equal(t, keystore.StatePending, rec.State)

			// Bit rot: the amount changes, the record still decodes, the fingerprint is the old one.
			rec.Request.Body = paymentBody(9250, "bitrot")
			require.NoError(t, store.Update(ctx, rec))

			if via == "Recover" {
				var got []Reconciled
				rep, err := c.Recover(ctx, func(r Reconciled) { got = append(got, r) })
				require.NoError(t, err)
				require.Equal(t, 1, rep.Manual)
				require.Len(t, got, 1)
				require.ErrorIs(t, got[0].Err, ErrInvalidOperation)
			} else {
				_, err := c.Do(ctx, op)
				require.ErrorIs(t, err, ErrInvalidOperation)
				require.Contains(t, err.Error(), "does not match the record's fingerprint")
			}
			require.Equal(t, int32(1), posts.Load(), "the damaged request was not sent")
			rec, err = store.Get(ctx, "", op.Key())
			require.NoError(t, err)
			require.Equal(t, keystore.StateManual, rec.State)
		})
	}
}
