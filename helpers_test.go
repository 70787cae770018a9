package idem

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/wait"
	"github.com/idemkit/idem/keystore"
)

// fakeClock is the injected clock: Sleep records the delay and advances Now at once, so
// tests assert exact waits without sleeping. realSleep, when set, makes every wait also take
// that much wall time, for tests whose server needs time to pass.
type fakeClock struct {
	mu        sync.Mutex
	now       time.Time
	sleeps    []time.Duration
	realSleep time.Duration
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
	f.mu.Lock()
	f.sleeps = append(f.sleeps, d)
	f.now = f.now.Add(d)
	real := f.realSleep
	f.mu.Unlock()
	if real > 0 {
		return wait.Sleep(ctx, real)
	}
	return nil
}

func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

func (f *fakeClock) Sleeps() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.sleeps...)
}

const statusPath = "/v1/payments/operations/{key}"

// env is one test's payments API, keystore and client on a shared fake clock.
type env struct {
	t     *testing.T
	srv   *idemtest.Server
	store keystore.Store
	clock *fakeClock
	c     *Client
}

func newEnv(t *testing.T, srvCfg idemtest.Config, mod func(*Config)) *env {
	t.Helper()
	e := &env{t: t, clock: newFakeClock(), store: keystore.NewMemory()}
	if srvCfg.Now == nil {
		srvCfg.Now = e.clock.Now
	}
	e.srv = idemtest.NewServer(srvCfg)
	t.Cleanup(e.srv.Close)
	cfg := Config{BaseURL: e.srv.URL, Store: e.store, KeyStatusURL: statusPath,
		Now: e.clock.Now, Sleep: e.clock.Sleep, Budget: BudgetConfig{Disabled: true}}
	if mod != nil {
		mod(&cfg)
	}
	c, err := NewClient(cfg)
	require.NoError(t, err)
	e.c = c
	return e
}

func paymentBody(amount int, ref string) []byte {
	b, _ := json.Marshal(map[string]any{"amount": amount, "currency": "EUR", "customer": "cus_1", "reference": ref})
	return b
}

func payment(amount int, ref string, opts ...OperationOption) *Operation {
	return NewOperation(http.MethodPost, "/v1/payments", paymentBody(amount, ref), opts...)
}

func (e *env) record(key string) *keystore.Record {
	e.t.Helper()
	rec, err := e.store.Get(context.Background(), "", key)
	require.NoError(e.t, err)
	return rec
}

func opErr(t *testing.T, err error) *OperationError {
	t.Helper()
	var oe *OperationError
	require.ErrorAs(t, err, &oe, fmt.Sprintf("error %v", err))
	return oe
}
