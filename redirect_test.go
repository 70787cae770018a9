package idem

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
)

// A server that charges and then answers a redirect, or whose status endpoint reports a 1xx
// or a 3xx as the key's stored answer: the payment may have moved, so the call never ends
// as a failure (ErrPermanent would tell the application "declined" and invite a second
// charge). A stored 3xx goes manual like a stored 5xx; a 1xx is no answer at all.
func TestRedirectsAndInterimStatusesAreNeverFailures(t *testing.T) {
	for _, tc := range []struct {
		name       string
		post       int // the POST's answer, after charging
		stored     int // the status endpoint's response_status
		want       error
		wantState  keystore.State
		wantChecks int
	}{
		{"303 after charging, stored 303", http.StatusSeeOther, http.StatusSeeOther, ErrStoredServerError, keystore.StateManual, 1},
		{"302 after charging, stored 302", http.StatusFound, http.StatusFound, ErrStoredServerError, keystore.StateManual, 1},
		{"timeout-like 504, stored 102", http.StatusGatewayTimeout, http.StatusProcessing, ErrOutcomeUnknown, keystore.StatePending, 2},
		{"timeout-like 504, stored 303", http.StatusGatewayTimeout, http.StatusSeeOther, ErrStoredServerError, keystore.StateManual, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var charges, posts atomic.Int32
			h := http.NewServeMux()
			h.HandleFunc("POST /v1/payments", func(w http.ResponseWriter, r *http.Request) {
				posts.Add(1)
				charges.Add(1)
				w.Header().Set("Location", "/v1/payments/pay_1")
				w.WriteHeader(tc.post)
			})
			h.HandleFunc("GET /v1/payments/operations/{key}", func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, `{"status":"completed","response_status":%d,"response_body":{}}`, tc.stored)
			})
			c, _, store := scriptedClient(t, h, func(c *Config) { c.KeyStatusURL = statusPath })
			op := payment(1, "order-1")
			_, err := c.Do(context.Background(), op, CallMaxAttempts(1), CallMaxKeyStatusChecks(2))
			require.ErrorIs(t, err, tc.want)
			assert.ErrorIs(t, err, ErrOutcomeUnknown, "never a failure")
			assert.NotErrorIs(t, err, ErrPermanent)
			rec, gerr := store.Get(context.Background(), "", op.Key())
			require.NoError(t, gerr)
			assert.Equal(t, tc.wantState, rec.State)
			assert.Equal(t, int32(1), posts.Load(), "nothing resent")
			assert.Equal(t, int64(tc.wantChecks), c.Stats().KeyStatusChecks)
			assert.Equal(t, int64(0), c.Stats().Failed)
		})
	}
}
