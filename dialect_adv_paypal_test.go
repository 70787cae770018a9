package idem

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/profile"
)

// slowWire delivers each POST after transit (by the fake clock): a request within the
// attempt timeout, queued in a load balancer.
type slowWire struct {
	clock   *fakeClock
	transit time.Duration
}

func (s *slowWire) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost {
		s.clock.Advance(s.transit)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// PayPal keeps a PayPal-Request-Id 6 h; the profile makes KeyTTL 6 h exactly. A resend
// that leaves just inside KeyTTL and arrives a few seconds later (well within the attempt
// timeout) reaches PayPal after it forgot the key: a new payment.
func TestDialectAdversarialPayPalResendAtRetentionEdgeNeverChargesTwice(t *testing.T) {
	clock := newFakeClock()
	srv := idemtest.NewServer(idemtest.Config{Dialect: idemtest.DialectPayPal, Now: clock.Now})
	defer srv.Close()
	store := keystore.NewMemory()
	wire := &slowWire{clock: clock}
	c, err := NewClient(Config{BaseURL: srv.URL, Store: store, Profile: profile.PayPal, Now: clock.Now, Sleep: clock.Sleep,
		HTTPClient: &http.Client{Transport: wire}, Budget: BudgetConfig{Disabled: true}})
	require.NoError(t, err)
	defer c.Close()

	srv.Script(idemtest.FaultDropAfterCommit) // charged, the answer lost
	_, err = c.Do(context.Background(), payment(100, "ord-1"), CallMaxAttempts(1))
	require.ErrorIs(t, err, ErrOutcomeUnknown) // pending, unknown

	clock.Advance(6*time.Hour - 2*time.Second)
	wire.transit = 5 * time.Second // < AttemptTimeout (10 s)
	_, err = c.Recover(context.Background(), func(r Reconciled) { t.Logf("recovered: %v", r.Err) })
	t.Logf("Recover: %v", err)
	charged, canceled := srv.ChargesByReference("ord-1")
	require.LessOrEqual(t, charged-canceled, 1, "ord-1 charged %d times", charged-canceled)
}
