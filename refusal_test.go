package idem

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
)

// ledgerLookup is a business lookup over the ledger API: a search by the payment's reference.
func ledgerLookup(a *ledgerAPI) LookupFunc {
	return func(_ context.Context, req LookupRequest) (Resolution, error) {
		var p struct{ Reference string }
		if err := json.Unmarshal(req.Record.Request.Body, &p); err != nil {
			return Resolution{}, err
		}
		if a.charges(p.Reference) > 0 {
			return Resolution{Verdict: VerdictExecuted, Note: "search: found " + p.Reference,
				Response: &keystore.Response{StatusCode: http.StatusCreated, Body: []byte(`{"id":"ch_1"}`)}}, nil
		}
		return Resolution{Verdict: VerdictNotExecuted, Note: "search: no " + p.Reference}, nil
	}
}

// A 400 to a resend after the status endpoint said "not found" tells nothing by itself: a
// business check ("duplicate reference") may have run before the key's and found the first
// request's charge, which the lagging status endpoint did not show yet; or the bytes are
// malformed, and the first request was refused alike. Without a business lookup the call
// ends ErrOutcomeUnknown (it ended ErrPermanent, and the application paid again); with one,
// the lookup tells which.
func TestBadRequestAfterNotFound(t *testing.T) {
	for _, tc := range []struct {
		name       string
		charged    bool // the first request charged (the 400 is a duplicate-reference check)
		lookup     bool
		want       error // nil: success from the lookup
		state      keystore.State
		wantCharge int
	}{
		{"duplicate reference, no lookup", true, false, ErrOutcomeUnknown, keystore.StatePending, 1},
		{"duplicate reference, lookup finds the charge", true, true, nil, keystore.StateSucceeded, 1},
		{"malformed, no lookup", false, false, ErrOutcomeUnknown, keystore.StatePending, 0},
		{"malformed, lookup finds nothing", false, true, ErrPermanent, keystore.StateFailed, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, n int64) {
				if n == 1 {
					if tc.charged { // charged, but the key's status lags behind
						a.mu.Lock()
						a.ledger[ref]++
						a.mu.Unlock()
					}
					panic(http.ErrAbortHandler) // the answer is lost
				}
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write([]byte(`{"error":"refused"}`))
			})
			c, _ := ledgerClient(t, a, func(cfg *Config) {
				if tc.lookup {
					cfg.Lookup = ledgerLookup(a)
				}
			})
			op := payment(1, "order-400", WithIntent("order-400"))
			res, err := c.Do(context.Background(), op)
			rec, gerr := c.store.GetByIntent(context.Background(), "", "order-400")
			require.NoError(t, gerr)
			assert.Equal(t, tc.state, rec.State)
			assert.Equal(t, tc.wantCharge, a.charges("order-400"))
			assert.EqualValues(t, 2, a.posts.Load())
			if tc.want == nil {
				require.NoError(t, err)
				assert.Equal(t, SourceLookup, res.Source)
				assert.Equal(t, http.StatusCreated, res.StatusCode)
				assert.Equal(t, ReasonExecuted, rec.Reason)
				assert.Equal(t, "search: found order-400", rec.Note)
				return
			}
			require.ErrorIs(t, err, tc.want)
			if tc.want == ErrOutcomeUnknown {
				assert.NotErrorIs(t, err, ErrPermanent)
				assert.False(t, rec.NotExecuted, "the next call asks first")
				return
			}
			e := opErr(t, err)
			require.NotNil(t, e.Response)
			assert.Equal(t, http.StatusBadRequest, e.Response.StatusCode)
			assert.Equal(t, `{"error":"refused"}`, string(e.Response.Body))
			assert.Contains(t, err.Error(), "business lookup found no payment")
			assert.Equal(t, "search: no order-400", rec.Note)
			assert.Equal(t, int64(1), c.Stats().ResolvedByLookup)
		})
	}
}
