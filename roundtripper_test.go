package idem

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
)

// keyLog records the idempotency key of every POST that reaches idemtest.
type keyLog struct {
	mu   sync.Mutex
	keys []string
}

func (l *keyLog) hook(r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keys = append(l.keys, r.Header.Get(defaultKeyHeader))
}

func (l *keyLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.keys...)
}

// closeTracker is a request body that remembers being closed.
type closeTracker struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeTracker) Close() error { c.closed.Store(true); return nil }

func newTransportEnv(t *testing.T, log *keyLog, mod func(*Config)) (*env, *http.Client) {
	t.Helper()
	e := newEnv(t, idemtest.Config{OnPayment: log.hook}, mod)
	return e, NewHTTPClient(e.c)
}

func postPayment(t *testing.T, ctx context.Context, hc *http.Client, url string, body []byte, header http.Header) (*http.Response, []byte, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/payments", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b, nil
}

// Faults before and after commit: one persisted key on every attempt, one execution, and
// the final 201 reconstructed as net/http would return it.
func TestTransportUnsafeFaults(t *testing.T) {
	tests := []struct {
		name     string
		faults   []idemtest.Fault
		attempts int
		source   string // Content-Type expectation differs for a status-endpoint answer
	}{
		{"clean", nil, 1, "response"},
		{"503 then 429", []idemtest.Fault{idemtest.Fault503, idemtest.Fault429}, 3, "response"},
		{"reset before processing", []idemtest.Fault{idemtest.FaultResetBeforeProcessing}, 2, "response"},
		{"drop after commit", []idemtest.Fault{idemtest.FaultDropAfterCommit}, 1, "status"},
		{"500 after commit", []idemtest.Fault{idemtest.Fault500AfterCommit}, 1, "status"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log keyLog
			e, hc := newTransportEnv(t, &log, nil)
			e.srv.Script(tt.faults...)
			resp, body, err := postPayment(t, context.Background(), hc, e.srv.URL, paymentBody(1250, "ord-1"), nil)
			require.NoError(t, err)
			assert.Equal(t, http.StatusCreated, resp.StatusCode)
			assert.Equal(t, "201 Created", resp.Status)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			assert.EqualValues(t, len(body), resp.ContentLength)
			assert.Contains(t, string(body), `"amount":1250`)

			keys := log.all()
			require.Len(t, keys, tt.attempts)
			for _, k := range keys {
				assert.Equal(t, keys[0], k, "every attempt carries the same key")
			}
			require.NoError(t, ValidateKey(keys[0]))
			assert.Equal(t, 1, e.srv.ExecutionsFor(keys[0]))
			assert.Equal(t, 1, e.srv.Stats().Executions)
			rec := e.record(keys[0])
			assert.Equal(t, keystore.StateSucceeded, rec.State)
			assert.Equal(t, tt.attempts, rec.Attempts)
			assert.Equal(t, "application/json", rec.Request.Header.Get("Content-Type"))
		})
	}
}

// The caller's own key header (any letter case) is adopted: the server sees it on every
// attempt and the record is persisted under it; an invalid one is refused before anything
// is persisted or sent.
func TestTransportAdoptsKeyHeader(t *testing.T) {
	var log keyLog
	e, hc := newTransportEnv(t, &log, nil)
	e.srv.Script(idemtest.FaultDropAfterCommit)
	resp, _, err := postPayment(t, context.Background(), hc, e.srv.URL, paymentBody(700, "ord-2"),
		http.Header{"idempotency-KEY": {"order-2-attempt-1"}})
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, []string{"order-2-attempt-1"}, log.all())
	assert.Equal(t, 1, e.srv.ExecutionsFor("order-2-attempt-1"))
	rec := e.record("order-2-attempt-1")
	assert.Equal(t, keystore.StateSucceeded, rec.State)
	for name := range rec.Request.Header {
		assert.False(t, strings.EqualFold(name, defaultKeyHeader), "the key header is not persisted as a plain header")
	}

	for _, bad := range [][]string{{"has space"}, {"a", "b"}, {strings.Repeat("k", maxKeyLength+1)}} {
		_, _, err := postPayment(t, context.Background(), hc, e.srv.URL, paymentBody(700, "ord-3"),
			http.Header{defaultKeyHeader: bad})
		require.ErrorIs(t, err, ErrInvalidOperation, "key %q", bad)
	}
	assert.Len(t, log.all(), 1, "nothing sent for a bad key header")
	recs, err := e.store.List(context.Background())
	require.NoError(t, err)
	assert.Len(t, recs, 1, "nothing persisted for a bad key header")
}

func TestTransportSFStringKeyHeader(t *testing.T) {
	var log keyLog
	e, hc := newTransportEnv(t, &log, func(c *Config) { c.KeyAsSFString = true })
	resp, _, err := postPayment(t, context.Background(), hc, e.srv.URL, paymentBody(5, "r"),
		http.Header{defaultKeyHeader: {`"k-\"1"`}})
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, []string{`"k-\"1"`}, log.all())
	assert.Equal(t, keystore.StateSucceeded, e.record(`k-"1`).State)

	_, _, err = postPayment(t, context.Background(), hc, e.srv.URL, paymentBody(5, "r"),
		http.Header{defaultKeyHeader: {`unquoted`}})
	require.ErrorIs(t, err, ErrInvalidOperation)
}

// The intent in the context binds requests to one key: a repeated request is answered from
// the keystore without sending; a key header naming another key for that intent is refused.
func TestTransportIntentAndTenantFromContext(t *testing.T) {
	var log keyLog
	e, hc := newTransportEnv(t, &log, nil)
	ctx := ContextWithTenant(ContextWithIntent(context.Background(), "order-9"), "acme")
	for range 2 {
		resp, _, err := postPayment(t, ctx, hc, e.srv.URL, paymentBody(900, "ord-9"), nil)
		require.NoError(t, err)
		assert.Equal(t, http.StatusCreated, resp.StatusCode)
	}
	keys := log.all()
	require.Len(t, keys, 1, "the second request is answered from the keystore")
	rec, err := e.store.GetByIntent(context.Background(), "acme", "order-9")
	require.NoError(t, err)
	assert.Equal(t, keys[0], rec.Key)
	assert.Equal(t, "acme", rec.Scope)

	_, _, err = postPayment(t, ctx, hc, e.srv.URL, paymentBody(900, "ord-9"), http.Header{defaultKeyHeader: {"other-key"}})
	require.ErrorIs(t, err, ErrKeyConflict)
	assert.Len(t, log.all(), 1)

	// Per-call options from the context: one attempt only, then an error, not a response.
	e.srv.Script(idemtest.Fault503)
	ctx2 := ContextWithCallOptions(ContextWithIntent(context.Background(), "order-10"), CallMaxAttempts(1))
	_, _, err = postPayment(t, ctx2, hc, e.srv.URL, paymentBody(100, "ord-10"), nil)
	require.ErrorIs(t, err, ErrExhausted)
	assert.Len(t, log.all(), 2)
}

// Which outcomes are responses and which are errors.
func TestTransportOutcomes(t *testing.T) {
	t.Run("validation failure is a response, and a repeat comes from the keystore", func(t *testing.T) {
		var log keyLog
		e, hc := newTransportEnv(t, &log, nil)
		h := http.Header{defaultKeyHeader: {"bad-amount-1"}}
		for range 2 {
			resp, body, err := postPayment(t, context.Background(), hc, e.srv.URL, []byte(`{"amount":0,"currency":"EUR","customer":"c"}`), h)
			require.NoError(t, err)
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
			assert.Contains(t, string(body), "amount")
		}
		assert.Len(t, log.all(), 1)
		assert.Equal(t, keystore.StateFailed, e.record("bad-amount-1").State)
	})
	t.Run("unknown outcome is an error", func(t *testing.T) {
		var log keyLog
		e, hc := newTransportEnv(t, &log, func(c *Config) { c.KeyStatusURL = "" })
		e.srv.Script(idemtest.FaultDropAfterCommit)
		_, _, err := postPayment(t, ContextWithCallOptions(context.Background(), CallMaxAttempts(1)), hc, e.srv.URL, paymentBody(1, "u"), nil)
		require.ErrorIs(t, err, ErrOutcomeUnknown)
		var oe *OperationError
		require.ErrorAs(t, err, &oe)
		assert.Equal(t, log.all()[0], oe.Key)
		assert.Equal(t, keystore.StatePending, e.record(oe.Key).State)
	})
	t.Run("503s until exhausted are an error carrying the key", func(t *testing.T) {
		var log keyLog
		e, hc := newTransportEnv(t, &log, nil)
		e.srv.Script(idemtest.Fault503, idemtest.Fault503)
		_, _, err := postPayment(t, ContextWithCallOptions(context.Background(), CallMaxAttempts(2)), hc, e.srv.URL, paymentBody(1, "x"), nil)
		require.ErrorIs(t, err, ErrExhausted)
		assert.False(t, errors.Is(err, ErrOutcomeUnknown))
		assert.Len(t, log.all(), 2)
		assert.Equal(t, 0, e.srv.Stats().Executions)
	})
	t.Run("stored 500 is never a response", func(t *testing.T) {
		var log keyLog
		e, hc := newTransportEnv(t, &log, nil)
		e.srv.Script(idemtest.FaultStored500)
		resp, _, err := postPayment(t, context.Background(), hc, e.srv.URL, paymentBody(1, "s"), nil)
		require.Error(t, err, "a stored 5xx must never come back as a final response")
		assert.Nil(t, resp)
		var oe *OperationError
		require.ErrorAs(t, err, &oe)
		assert.Equal(t, 500, oe.LastStatusCode)
		assert.Equal(t, []string{oe.Key}, log.all())
		assert.NotEqual(t, keystore.StateSucceeded, e.record(oe.Key).State)
	})
	t.Run("a payment the lookup found is a 2xx marked as such", func(t *testing.T) {
		var log keyLog
		e, hc := newTransportEnv(t, &log, withReferenceLookup(t))
		resp, _, err := postPayment(t, context.Background(), hc, e.srv.URL, paymentBody(1, "first"), nil)
		require.NoError(t, err)
		assert.Equal(t, http.StatusCreated, resp.StatusCode)
		assert.Equal(t, "response", resp.Header.Get(SourceHeader))
		keys := log.all()
		require.Len(t, keys, 1)
		assert.Equal(t, keys[0], resp.Header.Get(KeyResponseHeader), "the key of a success, to log")

		e.srv.Script(idemtest.FaultStored500AfterCharge)
		resp, body, err := postPayment(t, context.Background(), hc, e.srv.URL, paymentBody(2, "found"), nil)
		require.NoError(t, err, "charged, then a stored 500: the search by reference finds the payment")
		assert.Equal(t, http.StatusOK, resp.StatusCode, "the lookup's answer, not a 201")
		assert.Equal(t, "lookup", resp.Header.Get(SourceHeader))
		assert.Equal(t, "pay_2", jsonID(t, body))
		assert.Len(t, log.all(), 2, "nothing resent")
		assert.Equal(t, 1, e.srv.ExecutionsByReference("found"))
	})
}

// A body over the limit is refused with nothing persisted or sent; every body is closed.
func TestTransportBodyLimitAndClose(t *testing.T) {
	var log keyLog
	e := newEnv(t, idemtest.Config{OnPayment: log.hook}, nil)
	tr := &Transport{Client: e.c, MaxBodySize: 16}
	body := &closeTracker{Reader: bytes.NewReader(paymentBody(1, "big"))}
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/payments", body)
	require.NoError(t, err)
	req.ContentLength = -1 // unknown length: the limit is found by reading
	_, err = tr.RoundTrip(req)
	require.ErrorIs(t, err, ErrBodyTooLarge)
	require.ErrorIs(t, err, ErrInvalidOperation)
	assert.True(t, body.closed.Load())
	assert.Empty(t, log.all())
	recs, err := e.store.List(context.Background())
	require.NoError(t, err)
	assert.Empty(t, recs)

	tr.MaxBodySize = 0 // default 1 MiB
	ok := &closeTracker{Reader: bytes.NewReader(paymentBody(2, "fine"))}
	req, err = http.NewRequest(http.MethodPost, e.srv.URL+"/v1/payments", ok)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.True(t, ok.closed.Load())

	rel := &closeTracker{Reader: strings.NewReader("{}")}
	req = &http.Request{Method: http.MethodPost, URL: mustURL(t, "/v1/payments"), Header: http.Header{}, Body: rel}
	_, err = tr.RoundTrip(req.WithContext(context.Background()))
	require.ErrorIs(t, err, ErrInvalidOperation)
	assert.True(t, rel.closed.Load())

	_, err = (&Transport{}).RoundTrip(req.WithContext(context.Background()))
	require.ErrorIs(t, err, ErrInvalidConfig)
}

// Safe methods get plain bounded retries and no key.
func TestTransportSafeMethods(t *testing.T) {
	var n atomic.Int32
	var mu sync.Mutex
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get(defaultKeyHeader))
		mu.Unlock()
		if n.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, `{"id":"pay_1"}`)
	}))
	defer srv.Close()
	c, err := NewClient(Config{Policy: Policy{MaxAttempts: 3, InitialDelay: 1e6, MaxDelay: 2e6}})
	require.NoError(t, err)
	hc := NewHTTPClient(c)
	resp, err := hc.Get(srv.URL + "/v1/payments/pay_1")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, `{"id":"pay_1"}`, string(b))
	assert.Equal(t, []string{"", "", ""}, keys)

	n.Store(-10) // every answer 503 now: after MaxAttempts the last response comes back
	resp, err = hc.Get(srv.URL + "/x")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.EqualValues(t, -7, n.Load(), "three attempts")
	recs, err := c.Store().List(context.Background())
	require.NoError(t, err)
	assert.Empty(t, recs, "safe requests leave no record")
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}

// Two requests racing with one intent and two key headers: the check that the intent's key
// is the request's runs under the intent lock, so one is sent and the other refused, never
// answered with the other key's result.
func TestTransportIntentKeyRaceRefusesOne(t *testing.T) {
	for round := range 20 {
		var log keyLog
		e, hc := newTransportEnv(t, &log, nil)
		ctx := ContextWithIntent(context.Background(), "order-race")
		keys := []string{"key-A", "key-B"}
		errs := make([]error, 2)
		codes := make([]int, 2)
		var wg sync.WaitGroup
		for i, key := range keys {
			wg.Go(func() {
				resp, _, err := postPayment(t, ctx, hc, e.srv.URL, paymentBody(700, "ord-race"), http.Header{defaultKeyHeader: {key}})
				errs[i] = err
				if resp != nil {
					codes[i] = resp.StatusCode
				}
			})
		}
		wg.Wait()
		sent := log.all()
		require.Len(t, sent, 1, "round %d", round)
		won := slices.Index(keys, sent[0])
		require.NoError(t, errs[won], "round %d", round)
		require.Equal(t, http.StatusCreated, codes[won], "round %d", round)
		require.ErrorIs(t, errs[1-won], ErrKeyConflict, "round %d", round)
	}
}
