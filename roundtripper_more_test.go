package idem

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
)

// Which methods become operations: every method but exactly GET, HEAD, OPTIONS, TRACE, PUT
// and DELETE (RFC 9110 §9.2), plus those UnsafeMethods adds.
func TestTransportUnsafeMethods(t *testing.T) {
	tests := []struct {
		unsafe []string
		method string
		want   bool
	}{
		{nil, http.MethodPost, true},
		{nil, http.MethodPatch, true},
		{nil, "post", true},
		{nil, "Post", true},
		{nil, "get", true},
		{nil, "CHARGE", true},
		{nil, "CONNECT", true},
		{nil, http.MethodPut, false},
		{nil, http.MethodDelete, false},
		{nil, http.MethodGet, false},
		{nil, "", false}, // net/http sends "" as GET
		{nil, http.MethodHead, false},
		{nil, http.MethodOptions, false},
		{nil, http.MethodTrace, false},
		{[]string{"GET"}, "", true}, // "" is GET, which UnsafeMethods names
		{[]string{"GET"}, http.MethodGet, true},
		{[]string{"PUT"}, http.MethodPut, true},
		{[]string{"PUT"}, http.MethodDelete, false},
		{[]string{"PUT"}, http.MethodPatch, true},
		{[]string{}, http.MethodPost, true},
		{[]string{"PATCH"}, http.MethodPost, true},
	}
	for _, tt := range tests {
		tr := &Transport{UnsafeMethods: tt.unsafe}
		assert.Equal(t, tt.want, tr.unsafe(tt.method), "%v %q", tt.unsafe, tt.method)
	}
}

// A method outside the safe and idempotent ones, in any spelling, is sent with a persisted
// key and never retried blindly; one that is not a token is refused before anything is
// persisted or sent.
func TestTransportUnknownMethodsAreOperations(t *testing.T) {
	for _, method := range []string{"post", "Post", "CHARGE"} {
		t.Run(method, func(t *testing.T) {
			var n atomic.Int32
			var mu sync.Mutex
			var keys []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				keys = append(keys, r.Method+" "+r.Header.Get(defaultKeyHeader))
				mu.Unlock()
				if n.Add(1) == 1 {
					w.WriteHeader(http.StatusServiceUnavailable) // not executed: resent with the same key
					return
				}
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, `{"id":"pay_1"}`)
			}))
			defer srv.Close()
			clock := newFakeClock()
			c, err := NewClient(Config{Now: clock.Now, Sleep: clock.Sleep, Budget: BudgetConfig{Disabled: true},
				Policy: Policy{MaxAttempts: 3}})
			require.NoError(t, err)
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/payments", strings.NewReader(`{"amount":1}`))
			require.NoError(t, err)
			req.Method = method
			req.Header.Set(defaultKeyHeader, "key-"+method)
			resp, err := (&Transport{Client: c}).RoundTrip(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, http.StatusCreated, resp.StatusCode)
			assert.Equal(t, []string{method + " key-" + method, method + " key-" + method}, keys)
			rec, err := c.Store().Get(context.Background(), "", "key-"+method)
			require.NoError(t, err)
			assert.Equal(t, keystore.StateSucceeded, rec.State)
			assert.Equal(t, method, rec.Request.Method)
		})
	}
	c, err := NewClient(Config{})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/v1/payments", strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Method = "PO ST"
	_, err = (&Transport{Client: c}).RoundTrip(req)
	require.ErrorIs(t, err, ErrInvalidOperation)
	recs, err := c.Store().List(context.Background())
	require.NoError(t, err)
	assert.Empty(t, recs)
}

// parseSFString inverts sfString for every valid key, and never accepts what sfString could
// not have produced from a valid key.
func FuzzParseSFString(f *testing.F) {
	for _, s := range []string{`"abc"`, `"a\"b"`, `"a\\b"`, `""`, `"`, `abc`, `"a\b"`, "\"\x7f\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, ok := parseSFString(s)
		if !ok {
			return
		}
		if ValidateKey(k) == nil && sfString(k) != s {
			t.Fatalf("parseSFString(%q) = %q, which encodes back as %q", s, k, sfString(k))
		}
		if k2, ok := parseSFString(sfString(k)); !ok || k2 != k {
			t.Fatalf("round trip of %q failed: %q %v", k, k2, ok)
		}
	})
}

// A request with an empty method is a GET, and with GET among UnsafeMethods it is sent as an
// operation: with a persisted key.
func TestTransportEmptyMethodIsGET(t *testing.T) {
	var log keyLog
	e, _ := newTransportEnv(t, &log, nil)
	hc := &http.Client{Transport: &Transport{Client: e.c, UnsafeMethods: []string{http.MethodGet}}}
	req, err := http.NewRequestWithContext(context.Background(), "", e.srv.URL+"/v1/payments/pay_1", nil)
	require.NoError(t, err)
	resp, err := hc.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	recs, err := e.store.List(context.Background())
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.Equal(t, http.MethodGet, recs[0].Request.Method)
}
