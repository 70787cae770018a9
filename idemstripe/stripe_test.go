package idemstripe

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

const testSecret = "sk_test_idemstripe"

var quiet = &stripe.LeveledLogger{Level: stripe.LevelNull}

func noSleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// idemConfig is the idem side of every test client: no waits, no budget, no purge.
func idemConfig(store keystore.Store, maxAttempts int) idem.Config {
	return idem.Config{
		Store:         store,
		Policy:        idem.Policy{MaxAttempts: maxAttempts},
		Sleep:         noSleep,
		Budget:        idem.BudgetConfig{Disabled: true},
		PurgeInterval: -1,
	}
}

func newTestClient(t *testing.T, p *proxy, store keystore.Store, maxAttempts int) *Client {
	t.Helper()
	c, err := New(Config{SecretKey: testSecret, URL: p.URL, LeveledLogger: quiet, Idem: idemConfig(store, maxAttempts)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func piParams() *stripe.PaymentIntentCreateParams {
	return &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(1250), Currency: stripe.String(string(stripe.CurrencyEUR))}
}

// onlyKey returns the one key the proxy saw, failing when it saw several.
func onlyKey(t *testing.T, p *proxy) string {
	t.Helper()
	keys, _ := p.sent()
	require.NotEmpty(t, keys)
	for _, k := range keys {
		require.Equal(t, keys[0], k, "every send carries one key")
	}
	require.NotEmpty(t, keys[0])
	return keys[0]
}

func TestCreatePaymentIntent(t *testing.T) {
	p := newProxy(t)
	c := newTestClient(t, p, keystore.NewMemory(), 0)

	pi, err := c.V1PaymentIntents.Create(context.Background(), piParams())
	require.NoError(t, err)
	assert.NotEmpty(t, pi.ID)
	assert.Equal(t, int64(1250), pi.Amount)
	key := onlyKey(t, p)
	assert.Equal(t, 1, p.count(key))
	assert.Equal(t, key, pi.LastResponse.Header.Get(idem.KeyResponseHeader), "the key on the wire is idem's")
	assert.Equal(t, string(outcome.SourceResponse), pi.LastResponse.Header.Get(idem.SourceHeader))
	_, auth := p.sent()
	assert.Equal(t, "Bearer "+testSecret, auth[0])

	// A GET goes through idem's plain retries, no key of idem's, no record.
	got, err := c.V1PaymentIntents.Retrieve(context.Background(), pi.ID, nil)
	require.NoError(t, err)
	assert.NotEmpty(t, got.ID)
	keys, _ := p.sent()
	require.Len(t, keys, 2)
	assert.Empty(t, keys[1])
}

func TestRetryAfter503SendsTwiceWithOneKey(t *testing.T) {
	p := newProxy(t)
	p.then(busy503)
	c := newTestClient(t, p, keystore.NewMemory(), 0)

	pi, err := c.V1PaymentIntents.Create(context.Background(), piParams())
	require.NoError(t, err)
	assert.NotEmpty(t, pi.ID)
	keys, _ := p.sent()
	require.Len(t, keys, 2, "the 503, then the success")
	assert.Equal(t, keys[0], keys[1])
	assert.Equal(t, 2, p.count(keys[0]))
}

// The same persistent fault that sends a key 15 times through stripe-go's own retries over
// idem.NewHTTPClient (3 stripe-go tries x 5 idem attempts) sends it MaxAttempts times here.
func TestPersistentFaultSendsMaxAttempts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault fault
		is    error
	}{
		{"503", busy503, idem.ErrExhausted},
		{"500 after forwarding", after500, idem.ErrOutcomeUnknown},
		{"dropped after forwarding", dropAfter, idem.ErrOutcomeUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProxy(t)
			p.setAlways(tc.fault)
			c := newTestClient(t, p, keystore.NewMemory(), 3)

			_, err := c.V1PaymentIntents.Create(context.Background(), piParams())
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.is)
			key := onlyKey(t, p)
			assert.Equal(t, 3, p.count(key), "sends == Policy.MaxAttempts")
		})
	}

	t.Run("baseline: stripe-go retries over idem.NewHTTPClient", func(t *testing.T) {
		p := newProxy(t)
		p.setAlways(busy503)
		ic, err := idem.NewClient(idemConfig(keystore.NewMemory(), 0))
		require.NoError(t, err)
		defer ic.Close()
		b := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
			HTTPClient: idem.NewHTTPClient(ic), URL: stripe.String(p.URL), LeveledLogger: quiet})
		b.(*stripe.BackendImplementation).SetNetworkRetriesSleep(false)
		sc := stripe.NewClient(testSecret, stripe.WithBackends(&stripe.Backends{API: b}))
		_, err = sc.V1PaymentIntents.Create(context.Background(), piParams())
		require.Error(t, err)
		assert.Equal(t, 15, p.count(onlyKey(t, p)), "what the adapter prevents")

		p2 := newProxy(t)
		p2.setAlways(busy503)
		c := newTestClient(t, p2, keystore.NewMemory(), 0)
		_, err = c.V1PaymentIntents.Create(context.Background(), piParams())
		require.Error(t, err)
		assert.Equal(t, idem.DefaultPolicy().MaxAttempts, p2.count(onlyKey(t, p2)))
	})
}

func TestIntentCalledTwiceSendsOneKey(t *testing.T) {
	p := newProxy(t)
	c := newTestClient(t, p, keystore.NewMemory(), 0)
	ctx := WithIntent(context.Background(), "order-1")

	first, err := c.V1PaymentIntents.Create(ctx, piParams())
	require.NoError(t, err)
	second, err := c.V1PaymentIntents.Create(ctx, piParams())
	require.NoError(t, err, "no ErrKeyConflict from stripe-go's own random key")

	key := onlyKey(t, p)
	assert.Equal(t, 1, p.count(key), "the second call sends nothing")
	assert.Equal(t, first.ID, second.ID)
	assert.Equal(t, string(outcome.SourceStore), second.LastResponse.Header.Get(idem.SourceHeader))
	assert.Equal(t, key, second.LastResponse.Header.Get(idem.KeyResponseHeader))

	t.Run("baseline: stripe-go over idem.NewHTTPClient conflicts", func(t *testing.T) {
		ic, err := idem.NewClient(idemConfig(keystore.NewMemory(), 0))
		require.NoError(t, err)
		defer ic.Close()
		b := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
			HTTPClient: idem.NewHTTPClient(ic), URL: stripe.String(p.URL), LeveledLogger: quiet, MaxNetworkRetries: stripe.Int64(0)})
		sc := stripe.NewClient(testSecret, stripe.WithBackends(&stripe.Backends{API: b}))
		_, err = sc.V1PaymentIntents.Create(ctx, piParams())
		require.NoError(t, err)
		_, err = sc.V1PaymentIntents.Create(ctx, piParams())
		assert.ErrorIs(t, err, idem.ErrKeyConflict, "what the adapter prevents")
	})
}

// A restarted process (a new Client on the same store) continues the intent's persisted key.
func TestIntentKeyAcrossRestart(t *testing.T) {
	p := newProxy(t)
	store := keystore.NewMemory()
	ctx := WithIntent(context.Background(), "order-2")

	p.setAlways(dropAfter)
	c1 := newTestClient(t, p, store, 2)
	_, err := c1.V1PaymentIntents.Create(ctx, piParams())
	require.ErrorIs(t, err, idem.ErrOutcomeUnknown)
	require.NoError(t, c1.Close())

	p.setAlways(pass)
	c2 := newTestClient(t, p, store, 2)
	pi, err := c2.V1PaymentIntents.Create(ctx, piParams())
	require.NoError(t, err)
	assert.NotEmpty(t, pi.ID)
	key := onlyKey(t, p)
	assert.Equal(t, 3, p.count(key), "two sends before the restart, one after, one key")
}

func TestCallerKeyIsAdopted(t *testing.T) {
	p := newProxy(t)
	store := keystore.NewMemory()
	c := newTestClient(t, p, store, 0)
	params := piParams()
	params.SetIdempotencyKey("order-3-attempt-1")

	_, err := c.V1PaymentIntents.Create(context.Background(), params)
	require.NoError(t, err)
	assert.Equal(t, "order-3-attempt-1", onlyKey(t, p))
	rec, err := store.Get(context.Background(), "", "order-3-attempt-1")
	require.NoError(t, err)
	assert.Equal(t, keystore.StateSucceeded, rec.State)
}

func TestStored500IsStripeErrorAndOutcomeUnknown(t *testing.T) {
	p := newProxy(t)
	p.then(stored500)
	c := newTestClient(t, p, keystore.NewMemory(), 0)

	_, err := c.V1PaymentIntents.Create(context.Background(), piParams())
	require.Error(t, err)

	var se *stripe.Error
	require.ErrorAs(t, err, &se)
	assert.Equal(t, stripe.ErrorTypeAPI, se.Type)
	assert.Equal(t, http.StatusInternalServerError, se.HTTPStatusCode)
	var apiErr *stripe.APIError
	assert.ErrorAs(t, err, &apiErr)

	assert.ErrorIs(t, err, idem.ErrOutcomeUnknown)
	assert.ErrorIs(t, err, idem.ErrStoredServerError)
	var oe *idem.OperationError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, onlyKey(t, p), oe.Key)
	var ie *Error
	require.ErrorAs(t, err, &ie)
	assert.Same(t, oe, ie.Op)
	assert.Equal(t, 1, p.count(oe.Key), "a stored 500 is never resent")
}

func TestIdempotencyErrorIsStripeErrorAndKeyConflict(t *testing.T) {
	p := newProxy(t)
	p.then(idempotencyErr)
	c := newTestClient(t, p, keystore.NewMemory(), 0)

	_, err := c.V1PaymentIntents.Create(context.Background(), piParams())
	require.Error(t, err)

	var se *stripe.Error
	require.ErrorAs(t, err, &se)
	assert.Equal(t, stripe.ErrorTypeIdempotency, se.Type)
	assert.Equal(t, http.StatusBadRequest, se.HTTPStatusCode)
	var ie *stripe.IdempotencyError
	assert.ErrorAs(t, err, &ie)

	assert.ErrorIs(t, err, idem.ErrKeyConflict)
	assert.False(t, errors.Is(err, idem.ErrOutcomeUnknown), "a fresh key's first answer: not executed under it")
	assert.Equal(t, 1, p.count(onlyKey(t, p)))
}

// A record a crashed process left pending is resent by the next process's Recover with the
// secret key as credentials: the persisted request has no Authorization.
func TestRecoverAfterRestartSendsAuthorization(t *testing.T) {
	p := newProxy(t)
	store := keystore.NewMemory()

	p.setAlways(dropAfter)
	c1 := newTestClient(t, p, store, 1)
	_, err := c1.V1PaymentIntents.Create(context.Background(), piParams())
	require.ErrorIs(t, err, idem.ErrOutcomeUnknown)
	require.NoError(t, c1.Close())
	key := onlyKey(t, p)
	rec, err := store.Get(context.Background(), "", key)
	require.NoError(t, err)
	require.Equal(t, keystore.StatePending, rec.State)
	assert.Empty(t, rec.Request.Header.Get("Authorization"), "credentials are never persisted")

	p.setAlways(pass)
	c2 := newTestClient(t, p, store, 1)
	var got []idem.Reconciled
	rep, err := c2.Idem.Recover(context.Background(), func(r idem.Reconciled) { got = append(got, r) })
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Succeeded)
	require.Len(t, got, 1)
	require.NoError(t, got[0].Err)

	keys, auth := p.sent()
	require.Len(t, keys, 2)
	assert.Equal(t, key, keys[1], "Recover resends the persisted key")
	assert.Equal(t, "Bearer "+testSecret, auth[1])
}

// client_secret (and Config.RedactFields) are null in the stored response; the caller got
// the real one, and a repeat of the intent answered from the store gets null.
func TestClientSecretNeverStored(t *testing.T) {
	p := newProxy(t)
	store := keystore.NewMemory()
	c, err := New(Config{SecretKey: testSecret, URL: p.URL, LeveledLogger: quiet,
		Idem: idemConfig(store, 0), RedactFields: []string{"capture_method"}})
	require.NoError(t, err)
	defer c.Close()
	ctx := WithIntent(context.Background(), "order-4")

	params := piParams()
	pi, err := c.V1PaymentIntents.Create(ctx, params)
	require.NoError(t, err)
	require.NotEmpty(t, pi.ClientSecret, "the caller gets the real body")
	require.NotEmpty(t, pi.CaptureMethod)
	require.Contains(t, string(pi.LastResponse.RawJSON), pi.ClientSecret)

	rec, err := store.GetByIntent(context.Background(), "", "order-4")
	require.NoError(t, err)
	require.Equal(t, keystore.StateSucceeded, rec.State)
	require.NotNil(t, rec.Response)
	var stored map[string]any
	require.NoError(t, json.Unmarshal(rec.Response.Body, &stored))
	assert.Contains(t, stored, "client_secret")
	assert.Nil(t, stored["client_secret"], "client_secret is null in the store")
	assert.Contains(t, stored, "capture_method")
	assert.Nil(t, stored["capture_method"], "a caller's RedactFields too")
	assert.Equal(t, pi.ID, stored["id"], "the rest is kept")
	assert.NotContains(t, string(rec.Response.Body), pi.ClientSecret)

	again, err := c.V1PaymentIntents.Create(ctx, params)
	require.NoError(t, err)
	assert.Equal(t, pi.ID, again.ID)
	assert.Empty(t, again.ClientSecret, "answered from the store: no secret to give")
}
