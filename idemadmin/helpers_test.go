package idemadmin

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
)

// fakeClock is the injected clock: Sleep advances Now at once, so that tests never sleep.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Now().Truncate(time.Second)} }

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.Advance(d)
	return nil
}

func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

const statusPath = "/v1/payments/operations/{key}"

// env is one test's payments API, keystore and client on a shared fake clock.
type env struct {
	t     *testing.T
	srv   *idemtest.Server
	store keystore.Store
	clock *fakeClock
	c     *idem.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, clock: newFakeClock(), store: keystore.NewMemory()}
	e.srv = idemtest.NewServer(idemtest.Config{Now: e.clock.Now})
	t.Cleanup(e.srv.Close)
	c, err := idem.NewClient(idem.Config{BaseURL: e.srv.URL, Store: e.store, KeyStatusURL: statusPath,
		Now: e.clock.Now, Sleep: e.clock.Sleep, Budget: idem.BudgetConfig{Disabled: true}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	e.c = c
	return e
}

func (e *env) record(key string) *keystore.Record {
	e.t.Helper()
	rec, err := e.store.Get(context.Background(), "", key)
	require.NoError(e.t, err)
	return rec
}

func paymentBody(amount int, ref string) []byte {
	b, _ := json.Marshal(map[string]any{"amount": amount, "currency": "EUR", "customer": "cus_1", "reference": ref})
	return b
}

func newPendingRecord(key string, amount int, ref string, at time.Time) *keystore.Record {
	body := paymentBody(amount, ref)
	return &keystore.Record{Key: key, Fingerprint: idem.Fingerprint(http.MethodPost, "/v1/payments", body),
		State: keystore.StatePending, CreatedAt: at, UpdatedAt: at,
		Request: keystore.Request{Method: http.MethodPost, URL: "/v1/payments",
			Header: http.Header{"Content-Type": {"application/json"}}, Body: body}}
}
