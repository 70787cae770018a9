package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/examples/oapi/payments"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
)

// createPayment is the snippet docs/TRANSPORT.md quotes: a generated client over idem's
// transport, and what each outcome means.
func createPayment(ctx context.Context, baseURL string, store keystore.Store, addAPIKey func(*http.Request) error, orderID string) (string, error) {
	c, err := idem.NewClient(idem.Config{BaseURL: baseURL, Store: store,
		KeyStatusURL: "/v1/payments/operations/{key}", Credentials: addAPIKey})
	if err != nil {
		return "", err
	}
	defer c.Close()
	api, err := payments.NewClientWithResponses(baseURL,
		payments.WithHTTPClient(idem.NewHTTPClient(c)))
	if err != nil {
		return "", err
	}

	ctx = idem.ContextWithIntent(ctx, orderID) // the same order continues the same key (see below)
	resp, err := api.CreatePaymentWithResponse(ctx, nil, payments.PaymentRequest{Amount: 1250, Currency: "EUR", Customer: "cus_42"})
	switch {
	case err == nil && resp.StatusCode()/100 == 2: // paid: JSON201, or a 200 a business lookup found (Idem-Source: lookup)
		return "paid", nil
	case err == nil: // the server decided: a 4xx (declined, invalid), never retried
		return "declined", nil
	case errors.Is(err, idem.ErrStoredServerError), // a stored 5xx, or a key past the server's
		errors.Is(err, idem.ErrKeyExpired): // retention: reconcile (Lookup, Resolve), never pay again here
		return "reconcile", err
	case errors.Is(err, idem.ErrLeaseLost): // another instance took the record over: call again later, same intent
		return "taken over", err
	case errors.Is(err, idem.ErrOutcomeUnknown): // maybe paid: the record stays; call again only with the same intent
		return "unknown", err
	case errors.Is(err, idem.ErrNotExecuted): // settled as not executed: only now pay again, as a new intent
		return "pay again", err
	default: // not executed yet, or ErrKeyConflict (its message says whether a corrected request is a new intent): errors.As(err, new(*idem.OperationError))
		return "later", err
	}
}

// The snippet pays once through a lost answer, and a second call of the same order answers
// from the keystore without sending.
func TestTransportDocSnippet(t *testing.T) {
	api := idemtest.NewHandler(idemtest.Config{})
	defer api.Close()
	api.Script(idemtest.FaultDropAfterCommit)
	srv := httptest.NewServer(api)
	defer srv.Close()
	store := keystore.NewMemory()
	auth := func(r *http.Request) error { r.Header.Set("Authorization", "Bearer sk_test"); return nil }
	for run := 1; run <= 2; run++ {
		got, err := createPayment(context.Background(), srv.URL, store, auth, "order-42")
		require.NoError(t, err, "run %d", run)
		assert.Equal(t, "paid", got, "run %d", run)
	}
	assert.Equal(t, 1, api.Attempts(), "one POST: the lost answer was found through the status endpoint")
	assert.Len(t, api.Executions(), 1, "one charge")
}
