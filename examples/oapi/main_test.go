package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
)

// keysByRef records, for every POST that reaches the server, the key it carried, grouped by
// the payment's reference.
type keysByRef struct {
	mu   sync.Mutex
	keys map[string][]string
}

func (k *keysByRef) hook(r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var p struct{ Reference string }
	_ = json.Unmarshal(body, &p)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.keys[p.Reference] = append(k.keys[p.Reference], r.Header.Get("Idempotency-Key"))
}

// The generated client over idem.NewHTTPClient, against idemtest with every fault: each
// payment's POSTs all carry one key, the key persisted for its intent, and the ledger never
// holds a reference twice.
func TestGeneratedClientOverTransport(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			seen := &keysByRef{keys: map[string][]string{}}
			api := idemtest.NewServer(idemtest.Config{FaultRate: 0.5, Seed: seed, RetryAfter: -1, SlowDelay: -1,
				OnPayment: seen.hook})
			defer api.Close()
			store := keystore.NewMemory()
			c, err := idem.NewClient(idem.Config{BaseURL: api.URL, Store: store, KeyStatusURL: "/v1/payments/operations/{key}",
				Policy: idem.Policy{InitialDelay: 1e6, MaxDelay: 1e7}})
			require.NoError(t, err)
			refs := make([]string, 40)
			for i := range refs {
				refs[i] = fmt.Sprintf("ord-%d-%02d", seed, i)
			}
			out, err := payAll(context.Background(), c, api.URL, refs, func(i int) int64 {
				if i%8 == 7 {
					return 0 // invalid: 400
				}
				return int64(500 + i)
			})
			require.NoError(t, err)
			require.Len(t, out, len(refs))

			stats := api.Stats()
			faults := 0
			for _, n := range stats.Faults {
				faults += n
			}
			require.Greater(t, faults, 5, "the faults must have happened for the test to mean anything")

			paid, declined, unresolved := summarize(out)
			assert.Equal(t, len(refs), paid+declined+unresolved)
			assert.Equal(t, 5, declined, "the five invalid payments, each a 400 response")
			chargedUnknown := 0 // stored 500s after a charge: executed, but the key cannot say so
			for _, o := range out {
				if o.Err != nil {
					chargedUnknown += api.ExecutionsByReference(o.Reference)
				}
			}
			assert.Equal(t, paid+chargedUnknown, stats.Executions, "every execution is a paid payment or an unknown outcome")
			for i, o := range out {
				keys := seen.keys[o.Reference]
				require.NotEmpty(t, keys, o.Reference)
				rec, err := store.GetByIntent(context.Background(), "", o.Reference)
				require.NoError(t, err, o.Reference)
				for _, k := range keys {
					assert.Equal(t, rec.Key, k, "%s: every POST carries the persisted key", o.Reference)
				}
				assert.Equal(t, rec.Attempts, len(keys), "%s: attempts persisted = POSTs seen", o.Reference)
				executions := api.ExecutionsByReference(o.Reference)
				assert.LessOrEqual(t, executions, 1, "%s charged twice", o.Reference)
				switch {
				case o.Err != nil:
					// Only a stored 500 stays unresolved here: an unknown outcome (charged or
					// not), never a response, the record left for reconciliation.
					var oe *idem.OperationError
					require.True(t, errors.As(o.Err, &oe), "%s: %v", o.Reference, o.Err)
					assert.Equal(t, http.StatusInternalServerError, oe.LastStatusCode, o.Reference)
					assert.ErrorIs(t, o.Err, idem.ErrStoredServerError, o.Reference)
					assert.ErrorIs(t, o.Err, idem.ErrOutcomeUnknown, o.Reference)
					assert.Equal(t, keystore.StateManual, rec.State, o.Reference)
				case o.Payment != nil:
					assert.Equal(t, 1, executions, o.Reference)
					assert.Equal(t, int64(500+i), o.Payment.Amount)
					assert.Equal(t, o.Reference, *o.Payment.Reference)
					assert.Equal(t, keystore.StateSucceeded, rec.State)
				default:
					assert.Equal(t, http.StatusBadRequest, o.Status, o.Reference)
					assert.Equal(t, 0, executions, o.Reference)
					assert.Equal(t, keystore.StateFailed, rec.State)
					assert.Equal(t, http.StatusBadRequest, rec.LastStatusCode, "%s: the 400 was the last answer", o.Reference)
				}
			}
		})
	}
}
