package idem

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/profile"
)

// flakyUpdate fails the n-th Update (a database blip); every other call goes to Memory.
type flakyUpdate struct {
	*keystore.Memory
	n, calls atomic.Int32
}

func (s *flakyUpdate) Update(ctx context.Context, r *keystore.Record) error {
	if s.calls.Add(1) == s.n.Load() {
		return errors.New("connection reset by peer")
	}
	return s.Memory.Update(ctx, r)
}

// Where nothing is cached on error, the write right before a resend is what bounds the
// key's last send for a successor (resumedLastSend). A store error on that write is only
// logged, and the resend goes anyway: after a crash the successor dates the last send from
// the write before the 240 s wait, searches at once, finds nothing (the resend is still on
// its way) and pays again.
func TestDialectAdversarial2CheckoutResendAfterAFailedPreSendWriteNeverChargesTwice(t *testing.T) {
	clock := newFakeClock()
	s := &ckoScript{kept: map[string][]byte{}, charges: map[string]int{}, ra: "240"}
	srv := httptest.NewServer(s)
	defer srv.Close()
	store := &flakyUpdate{Memory: keystore.NewMemory()}
	store.n.Store(int32(ctlN)) // 1: retry's write before the wait; 2: prepareRetry's write right before the resend
	tr := &crashAt{clock: clock}
	cfg := Config{BaseURL: srv.URL, Store: store, Profile: profile.Checkout, Now: clock.Now, Sleep: clock.Sleep,
		HTTPClient: &http.Client{Transport: tr}, Budget: BudgetConfig{Disabled: true}}
	c1, err := NewClient(cfg)
	require.NoError(t, err)
	defer c1.Close() // after the oracle: the first process "crashed", its client is only tidied up
	func() {
		defer func() { t.Logf("first process: %v", recover()) }()
		_, derr := c1.Do(context.Background(), payment(100, "ord-1"), CallMaxRetryAfter(300e9), CallMaxElapsed(600e9))
		t.Logf("Do: %v (updates %d)", derr, store.calls.Load())
	}()
	cfg.Fleet.Owner = "second"
	c2, err := NewClient(cfg)
	require.NoError(t, err)
	defer c2.Close()
	_, err = c2.Recover(context.Background(), func(r Reconciled) { t.Logf("recovered: %v", r.Err) })
	t.Logf("Recover: %v; failed writes: Update #%d", err, store.n.Load())
	require.LessOrEqual(t, s.charges["ord-1"], 1, "ord-1 charged %d times", s.charges["ord-1"])
}

var ctlN = 2 // 0 in the control run: no write fails
