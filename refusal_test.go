package idem

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/event"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
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

// A 400 to a resend after the status endpoint said "not found" is the payment's answer: by
// the contract nothing was executed, and malformed bytes, which the first request shares,
// were or will be refused alike. A server whose duplicate-reference check runs ahead of the
// key's, with a status endpoint lagging behind, answers 400 for a charged payment too: the
// business lookup, when there is one, is asked first, and a payment found makes the call a
// success. Without one the call fails (the limit the README names).
func TestBadRequestAfterNotFound(t *testing.T) {
	for _, tc := range []struct {
		name       string
		charged    bool // the first request charged (the 400 is a duplicate-reference check)
		lookup     bool
		want       error // nil: success from the lookup
		state      keystore.State
		wantCharge int
	}{
		{"duplicate reference, no lookup", true, false, ErrPermanent, keystore.StateFailed, 1},
		{"duplicate reference, lookup finds the charge", true, true, nil, keystore.StateSucceeded, 1},
		{"malformed, no lookup", false, false, ErrPermanent, keystore.StateFailed, 0},
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
			var resolved []event.Resolved
			c, _ := ledgerClient(t, a, func(cfg *Config) {
				cfg.Hooks.OnResolved = func(e event.Resolved) { resolved = append(resolved, e) }
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
				assert.Equal(t, outcome.SourceLookup, res.Source)
				assert.Equal(t, http.StatusCreated, res.StatusCode)
				assert.Equal(t, keystore.ReasonExecuted, rec.Reason)
				assert.Equal(t, "search: found order-400", rec.Note)
				require.Len(t, resolved, 1)
				assert.True(t, resolved[0].Executed)
				assert.True(t, resolved[0].ByLookup)
				return
			}
			require.ErrorIs(t, err, ErrPermanent)
			e := opErr(t, err)
			require.NotNil(t, e.Response)
			assert.Equal(t, http.StatusBadRequest, e.Response.StatusCode)
			assert.Equal(t, `{"error":"refused"}`, string(e.Response.Body))
			assert.Empty(t, rec.Note)
			assert.Empty(t, resolved)
			assert.Equal(t, int64(0), c.Stats().ResolvedByLookup)
		})
	}
}

// The first request passes a duplicate-reference check (reserving the reference) and stalls
// before the key's; the client times out, the status endpoint rightly says "not found", the
// resend gets a 422 "duplicate reference", and a search finds no charge, since there is none
// yet. Then the first request charges. The call must not have said "failed": it ends
// ErrOutcomeUnknown whatever the search said, and the next call of the intent finds the
// payment through the key.
func TestRefusalWhileTheFirstRequestIsStillRunning(t *testing.T) {
	release := make(chan struct{})
	stalled := make(chan struct{})
	a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, n int64) {
		if n == 1 {
			close(stalled)
			<-release // reserved the reference; the key is not claimed yet
			a.charge(httptest.NewRecorder(), key, ref)
			return
		}
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = w.Write([]byte(`{"error":"duplicate_reference"}`))
	})
	c, _ := ledgerClient(t, a, func(cfg *Config) {
		cfg.Lookup = ledgerLookup(a)
		cfg.Policy.AttemptTimeout = 50 * time.Millisecond
	})
	op := payment(1, "order-stall", WithIntent("order-stall"))
	_, err := c.Do(context.Background(), op)
	<-stalled
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	assert.NotErrorIs(t, err, ErrPermanent)
	close(release)
	require.Eventually(t, func() bool { return a.charges("order-stall") == 1 }, 5*time.Second, time.Millisecond)
	res, err := c.Do(context.Background(), op)
	require.NoError(t, err)
	assert.Equal(t, outcome.SourceKeyStatus, res.Source)
	assert.Equal(t, 1, a.charges("order-stall"))
}
