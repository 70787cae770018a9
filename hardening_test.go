package idem

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
	"github.com/idemkit/idem/outcome"
)

// Operations that can never be sent or stored are refused before a record exists.
func TestUnsendableOperationsAreRefusedBeforePersisting(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, nil)
	for name, op := range map[string]*Operation{
		"mailto URL":                     NewOperation("POST", "mailto:ops@example.com", nil),
		"no host":                        NewOperation("POST", "http:///x", nil),
		"CRLF in a header":               payment(1, "x", WithHeader(http.Header{"X-Note": {"a\r\nX-Evil: 1"}})),
		"non-UTF-8 header":               payment(1, "x", WithHeader(http.Header{"X-Note": {"caf\xe9"}})),
		"bad header name":                payment(1, "x", WithHeader(http.Header{"X Note": {"a"}})),
		"non-UTF-8 intent":               payment(1, "x", WithIntent("order-\xff")),
		"intent over MaxIntentLength":    payment(1, "x", WithIntent(strings.Repeat("i", MaxIntentLength+1))),
		"tenant over maxTenantLength":    payment(1, "x", WithTenant(strings.Repeat("t", maxTenantLength+1))),
		"user info in URL":               NewOperation("POST", strings.Replace(e.srv.URL, "http://", "http://user:pass@", 1)+"/v1/payments", nil),
		"user and password":              NewOperation("POST", "http://user:pass@127.0.0.1:1/v1/payments", nil),
		"user only":                      NewOperation("POST", "https://sk_live_x@api.example.com/v1/payments", nil),
		"scheme-relative":                NewOperation("POST", "//user:pass@api.example.com/v1/payments", nil),
		"space in a query":               NewOperation("POST", "/v1/payments?note=a b", nil),
		"space in a query, absolute URL": NewOperation("POST", e.srv.URL+"/v1/payments?note=a b", nil),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := e.c.Do(context.Background(), op, CallMaxAttempts(3))
			require.ErrorIs(t, err, ErrInvalidOperation)
			_, err = e.store.Get(context.Background(), "", op.Key())
			require.ErrorIs(t, err, keystore.ErrNotFound)
		})
	}
	_, err := e.c.Do(context.Background(), payment(1, "x"), CallPolicy(Policy{MaxResponseSize: 1 << 62}))
	require.ErrorIs(t, err, ErrInvalidPolicy)
	assert.Equal(t, 0, e.srv.Stats().Requests)
	// At the limits, both are persisted and sent.
	_, err = e.c.Do(context.Background(), payment(1, "x", WithIntent(strings.Repeat("i", MaxIntentLength)),
		WithTenant(strings.Repeat("t", maxTenantLength))))
	require.NoError(t, err)
	_, err = NewClient(Config{BaseURL: e.srv.URL, HTTPClient: &http.Client{Transport: (*http.Transport)(nil)}})
	require.ErrorIs(t, err, ErrInvalidConfig)
	long, err := NewClient(Config{BaseURL: e.srv.URL, Store: e.store, Tenant: strings.Repeat("t", maxTenantLength+1)})
	require.NoError(t, err)
	defer long.Close()
	_, err = long.Do(context.Background(), payment(1, "x"))
	require.ErrorIs(t, err, ErrInvalidOperation)

	// A record persisted before the limits existed is still found and finished, by intent
	// and by key: refusing it would invite a new intent, a new key, a second charge.
	ctx := context.Background()
	for _, byIntent := range []bool{true, false} {
		intent, tenant := "", strings.Repeat("t", maxTenantLength+1)
		if byIntent {
			intent = strings.Repeat("i", MaxIntentLength+1)
		}
		op := payment(1, "old", WithIntent(intent), WithTenant(tenant))
		now := e.clock.Now()
		require.NoError(t, e.store.Create(ctx, &keystore.Record{Scope: tenant, Key: op.Key(), Intent: intent,
			Fingerprint: Fingerprint(op.method, e.c.target(op.url), op.body), State: keystore.StatePending,
			Request: keystore.Request{Method: op.method, URL: op.url, Body: op.body}, CreatedAt: now, UpdatedAt: now}))
		again := payment(1, "old", WithIntent(intent), WithTenant(tenant)) // a new key: found by intent
		if !byIntent {
			again = payment(1, "old", WithKey(op.Key()), WithTenant(tenant))
		}
		res, err := e.c.Do(ctx, again)
		require.NoError(t, err, "by intent %v", byIntent)
		assert.Equal(t, op.Key(), res.Key)
	}
}

// A classifier that calls a transport error a success, or answers an unknown class, cannot
// crash the call or skip the status check.
func TestMisbehavingClassifierFallsBackToUnknown(t *testing.T) {
	for name, class := range map[string]outcome.Class{"success without response": outcome.ClassSuccess, "out of range": outcome.Class(42)} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, idemtest.Config{}, func(c *Config) {
				c.Classifiers = outcome.Classifiers{outcome.ClassifierFunc(func(a *outcome.Attempt) outcome.Class {
					if a.Err != nil || a.StatusCode() >= 500 {
						return class
					}
					return outcome.ClassUndecided
				}), outcome.ClassifierFunc(outcome.ClassifyStatusCode)}
			})
			e.srv.Script(idemtest.FaultDropAfterCommit)
			op := payment(1, "cls")
			res, err := e.c.Do(context.Background(), op)
			require.NoError(t, err)
			assert.Equal(t, outcome.SourceKeyStatus, res.Source, "asked, not resent")
			assert.Equal(t, 1, e.srv.AttemptsFor(op.Key()))
		})
	}
}

// A custom KeyStatusFunc's "completed" without a real HTTP status proves nothing.
func TestStatusFuncGarbageIsUnknown(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, nil)
	e.srv.Script(idemtest.FaultDropAfterCommit)
	_, err := e.c.Do(context.Background(), payment(1, "g"), CallMaxKeyStatusChecks(2),
		CallKeyStatusFunc(func(context.Context, outcome.KeyStatusRequest) (outcome.KeyStatus, error) {
			return outcome.KeyStatus{State: outcome.KeyStatusCompleted, ResponseStatusCode: 0}, nil
		}))
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.NotErrorIs(t, err, ErrPermanent)
}

// "Completed" with a status that never ends an operation (409 in progress, 408, 425, 429)
// is no final answer: the call ends outcome unknown, the record pending, never a failure
// after which the application would pay again. A completed 4xx that is final still fails.
func TestStatusCompletedNotFinalIsUnknown(t *testing.T) {
	for _, code := range []int{409, 408, 425, 429, 402} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			e := newEnv(t, idemtest.Config{}, nil)
			e.srv.Script(idemtest.FaultDropAfterCommit)
			op := payment(1, fmt.Sprintf("nf-%d", code))
			asked := 0
			_, err := e.c.Do(context.Background(), op, CallMaxKeyStatusChecks(3),
				CallKeyStatusFunc(func(context.Context, outcome.KeyStatusRequest) (outcome.KeyStatus, error) {
					asked++
					return outcome.KeyStatus{State: outcome.KeyStatusCompleted, ResponseStatusCode: code}, nil
				}))
			if code == 402 {
				require.ErrorIs(t, err, ErrPermanent)
				assert.Equal(t, 1, asked)
				assert.Equal(t, keystore.StateFailed, e.record(op.Key()).State)
				return
			}
			require.ErrorIs(t, err, ErrOutcomeUnknown)
			require.NotErrorIs(t, err, ErrPermanent)
			assert.Equal(t, 3, asked)
			assert.Equal(t, keystore.StatePending, e.record(op.Key()).State)
			assert.Equal(t, 1, e.srv.AttemptsFor(op.Key()), "never resent")
		})
	}
}

// A KeyStatusFunc may add headers to the request it is given, for an operation created
// without any too (the map is the call's own copy).
func TestKeyStatusFuncGetsAWritableHeader(t *testing.T) {
	for name, opts := range map[string][]OperationOption{
		"no header":          nil,
		"WithHeader(nil)":    {WithHeader(nil)},
		"WithHeader(empty)":  {WithHeader(http.Header{})},
		"WithHeader(values)": {WithHeader(http.Header{"X-Account": {"acct_1"}})},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, idemtest.Config{}, nil)
			e.srv.Script(idemtest.FaultDropAfterCommit)
			asked := 0
			op := payment(1, "h-"+name, opts...)
			_, err := e.c.Do(context.Background(), op, CallMaxKeyStatusChecks(1),
				CallKeyStatusFunc(func(_ context.Context, req outcome.KeyStatusRequest) (outcome.KeyStatus, error) {
					asked++
					require.NotNil(t, req.Header)
					req.Header.Set("X-Trace", "1")
					return outcome.KeyStatus{State: outcome.KeyStatusUnknown}, nil
				}))
			require.ErrorIs(t, err, ErrOutcomeUnknown)
			require.Equal(t, 1, asked)
			require.Empty(t, op.Header().Get("X-Trace"), "the operation's own headers are not changed")
		})
	}
}

// A status endpoint that redirects is not the API's answer.
func TestStatusCheckDoesNotFollowRedirects(t *testing.T) {
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"status":"completed","response_status":201,"response_body":{}}`))
	}))
	defer elsewhere.Close()
	h := http.NewServeMux()
	h.HandleFunc("POST /v1/payments", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	h.HandleFunc("GET /v1/payments/operations/{key}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/x", http.StatusFound)
	})
	c, _, _ := scriptedClient(t, h, func(c *Config) { c.KeyStatusURL = statusPath })
	_, err := c.Do(context.Background(), payment(1, "r"), CallMaxKeyStatusChecks(2))
	require.ErrorIs(t, err, ErrOutcomeUnknown)
}

// A 2xx with a legal but non-UTF-8 header is still recorded as succeeded in the file store.
func TestNonUTF8ResponseHeaderIsStillPersisted(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["X-Trace"] = []string{"caf\xe9"}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"pay_1"}`))
	})
	store, err := boltstore.Open(filepath.Join(t.TempDir(), "k.db"), &boltstore.Options{Timeout: time.Second})
	require.NoError(t, err)
	defer store.Close()
	c, _, _ := scriptedClient(t, h, func(c *Config) { c.Store = store })
	op := payment(1, "utf")
	res, err := c.Do(context.Background(), op)
	require.NoError(t, err)
	assert.Equal(t, "caf\xe9", res.Header.Get("X-Trace"), "the caller still sees it")
	rec, err := store.Get(context.Background(), "", op.Key())
	require.NoError(t, err)
	assert.Equal(t, keystore.StateSucceeded, rec.State)
	assert.Equal(t, `{"id":"pay_1"}`, string(rec.Response.Body))
	assert.Empty(t, rec.Response.Header.Get("X-Trace"))
}

// A nil context, a nil *Client or one not made by NewClient is a clear error at every entry
// point, never a panic, and nothing is persisted or sent.
func TestNilClientAndContextAreRefused(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, nil)
	op := payment(1, "x")
	var nilCtx context.Context
	ctx := context.Background()
	res := Resolution{Verdict: VerdictNotExecuted}
	post := func(c *Client, ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/v1/payments", strings.NewReader(`{}`))
		require.NoError(t, err)
		_, err = (&Transport{Client: c}).RoundTrip(req)
		return err
	}
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"Do nil ctx", func() error { _, err := e.c.Do(nilCtx, op); return err }, ErrInvalidOperation},
		{"Do nil client", func() error { _, err := (*Client)(nil).Do(ctx, op); return err }, ErrInvalidConfig},
		{"Do zero client", func() error { _, err := (&Client{}).Do(ctx, op); return err }, ErrInvalidConfig},
		{"Recover nil ctx", func() error { _, err := e.c.Recover(nilCtx, nil); return err }, ErrInvalidOperation},
		{"Recover nil client", func() error { _, err := (*Client)(nil).Recover(ctx, nil); return err }, ErrInvalidConfig},
		{"Resolve nil ctx", func() error { _, err := e.c.Resolve(nilCtx, "", op.Key(), res); return err }, ErrInvalidOperation},
		{"Resolve nil client", func() error { _, err := (*Client)(nil).Resolve(ctx, "", op.Key(), res); return err }, ErrInvalidConfig},
		{"Transport nil client", func() error { return post(nil, ctx) }, ErrInvalidConfig},
		{"Transport zero client", func() error { return post(&Client{}, ctx) }, ErrInvalidConfig},
		{"nil Transport", func() error {
			req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/payments", nil)
			require.NoError(t, err)
			_, err = (*Transport)(nil).RoundTrip(req)
			return err
		}, ErrInvalidConfig},
		{"Transport request without URL", func() error { _, err := (&Transport{Client: e.c}).RoundTrip(&http.Request{}); return err }, ErrInvalidOperation},
		{"Transport nil request", func() error { _, err := (&Transport{Client: e.c}).RoundTrip(nil); return err }, ErrInvalidOperation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NotPanics(t, func() { require.ErrorIs(t, tc.call(), tc.want) })
		})
	}
	_, err := e.store.Get(ctx, "", op.Key())
	require.ErrorIs(t, err, keystore.ErrNotFound)
	assert.Equal(t, 0, e.srv.Stats().Requests)
	var nc *Client
	require.NotPanics(t, func() {
		assert.Nil(t, nc.Store())
		assert.Equal(t, Stats{}, nc.Stats())
		assert.NoError(t, nc.Close())
		assert.NoError(t, (&Client{}).Close())
		assert.Equal(t, "", nc.Owner())
		assert.Equal(t, `idem: operation error (key "", 0 attempt(s))`, (&OperationError{}).Error())
	})

}
