package webhook_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/profile"
	"github.com/idemkit/idem/webhook"
)

// A manual record for reference ord-1 whose payment was charged (a stored 500 after the
// charge). An event for the same reference that speaks of another attempt (an earlier
// attempt refused by the issuer, its AUTHORISATION success=false delivered late or again)
// settles it as not executed: the application pays again and the customer is charged twice.
func TestDialectAdversarialWebhookStaleRefusalByReferenceNeverChargesTwice(t *testing.T) {
	srv := idemtest.NewServer(idemtest.Config{Dialect: idemtest.DialectStripe, Now: clockNow})
	defer srv.Close()
	store := keystore.NewMemory()
	c, err := idem.NewClient(idem.Config{BaseURL: srv.URL, Store: store, Profile: profile.Stripe, Now: clockNow,
		Budget: idem.BudgetConfig{Disabled: true}})
	require.NoError(t, err)
	defer c.Close()
	body := []byte(`{"amount":100,"currency":"EUR","customer":"cus_1","reference":"ord-1"}`)

	srv.Script(idemtest.FaultStored500AfterCharge)
	_, err = c.Do(context.Background(), idem.NewOperation(http.MethodPost, idemtest.PaymentsPath, body, idem.WithIntent("ord-1#1")))
	require.ErrorIs(t, err, idem.ErrStoredServerError) // manual: charged, the answer a 500

	// The late event of an earlier, refused attempt of the same order.
	_, err = webhook.Settle(context.Background(), c, webhook.Event{Reference: "ord-1", Verdict: idem.VerdictNotExecuted,
		Note: "AUTHORISATION success=false (attempt #0)"})
	require.ErrorIs(t, err, idem.ErrInvalidOperation, "a refusal must name its key")
	// The application pays again only when the first intent was settled as not executed.
	_, err = c.Do(context.Background(), idem.NewOperation(http.MethodPost, idemtest.PaymentsPath, body, idem.WithIntent("ord-1#1")))
	if errors.Is(err, idem.ErrNotExecuted) {
		_, _ = c.Do(context.Background(), idem.NewOperation(http.MethodPost, idemtest.PaymentsPath, body, idem.WithIntent("ord-1#2")))
	}
	charged, canceled := srv.ChargesByReference("ord-1")
	require.LessOrEqual(t, charged-canceled, 1, "ord-1 charged %d times", charged-canceled)
}

var clockAt = time.Now()

func clockNow() time.Time { return clockAt }
