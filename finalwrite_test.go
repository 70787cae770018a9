package idem

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/event"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
)

// crashingStore loses every deferred write, as a crash before its flush does, and can fail
// its synchronous Update of a failed record.
type crashingStore struct {
	keystore.Store
	failFailed bool // Update of a failed record returns errStoreDown
	deferred   atomic.Int64
}

var errStoreDown = errors.New("store down")

func (s *crashingStore) UpdateDeferred(context.Context, *keystore.Record) error {
	s.deferred.Add(1)
	return nil
}

func (s *crashingStore) Update(ctx context.Context, rec *keystore.Record) error {
	if s.failFailed && rec.State == keystore.StateFailed {
		return errStoreDown
	}
	return s.Store.Update(ctx, rec)
}

// guarded refuses a request without the right credential with a 401 before it reaches the
// payments API, which therefore stores nothing for its key (as Stripe does for requests
// refused before execution).
func guarded(t *testing.T) (*httptest.Server, *idemtest.Server) {
	api := idemtest.NewServer(idemtest.Config{})
	t.Cleanup(api.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer good" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		api.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, api
}

func bearer(token string) func(*http.Request) error {
	return func(r *http.Request) error { r.Header.Set("Authorization", "Bearer "+token); return nil }
}

// A refusal the server did not store (a 401 before execution) is written to the keystore
// before Do returns ErrPermanent: a crash that lost deferred writes leaves the record failed,
// and a restarted process's Recover sends nothing. With the write deferred, the record stayed
// pending, the status endpoint said "not found", and Recover charged the payment the
// application had been told failed.
func TestFailedFinalWriteSurvivesACrash(t *testing.T) {
	srv, api := guarded(t)
	store := &crashingStore{Store: keystore.NewMemory()}
	clock := newFakeClock()
	c, err := NewClient(Config{BaseURL: srv.URL, Store: store, KeyStatusURL: statusPath, Now: clock.Now,
		Sleep: clock.Sleep, Budget: BudgetConfig{Disabled: true}, Credentials: bearer("revoked")})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = c.Do(ctx, payment(100, "order-f1", WithIntent("order-f1")))
	require.ErrorIs(t, err, ErrPermanent)
	key := opErr(t, err).Key
	require.NoError(t, c.Close())

	rec, err := store.Get(ctx, "", key)
	require.NoError(t, err)
	assert.Equal(t, keystore.StateFailed, rec.State, "on disk before Do returned")
	assert.Equal(t, http.StatusUnauthorized, rec.LastStatusCode)
	assert.Zero(t, store.deferred.Load(), "a failure is not deferred")

	var sends atomic.Int64
	c2, err := NewClient(Config{BaseURL: srv.URL, Store: store, KeyStatusURL: statusPath, Now: clock.Now,
		Sleep: clock.Sleep, Budget: BudgetConfig{Disabled: true}, Credentials: bearer("good"),
		Hooks: event.Hooks{OnAttempt: func(event.Attempt) { sends.Add(1) }}})
	require.NoError(t, err)
	defer c2.Close()
	rep, err := c2.Recover(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, 0, rep.Pending)
	assert.Zero(t, sends.Load(), "nothing resent")
	assert.Equal(t, 0, api.ExecutionsByReference("order-f1"))
}

// When the keystore cannot record the refusal, Do does not report a failure the store may
// not hold (the record may still be pending and be sent again): ErrOutcomeUnknown, the
// refusal kept in Response and named in the message, the store's error in the chain.
func TestFailedFinalWriteErrorIsOutcomeUnknown(t *testing.T) {
	srv, _ := guarded(t)
	store := &crashingStore{Store: keystore.NewMemory(), failFailed: true}
	clock := newFakeClock()
	c, err := NewClient(Config{BaseURL: srv.URL, Store: store, KeyStatusURL: statusPath, Now: clock.Now,
		Sleep: clock.Sleep, Budget: BudgetConfig{Disabled: true}, Credentials: bearer("revoked")})
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Do(context.Background(), payment(100, "order-f2"))
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	assert.NotErrorIs(t, err, ErrPermanent)
	assert.ErrorIs(t, err, errStoreDown)
	e := opErr(t, err)
	require.NotNil(t, e.Response)
	assert.Equal(t, http.StatusUnauthorized, e.Response.StatusCode)
	assert.Equal(t, 1, e.Attempts)
	assert.Contains(t, err.Error(), "could not record the failure")
	assert.Equal(t, int64(0), c.Stats().Failed)
	rec, err := store.Get(context.Background(), "", e.Key)
	require.NoError(t, err)
	assert.Equal(t, keystore.StatePending, rec.State)
}
