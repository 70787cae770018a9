package idem

import (
	"bytes"
	"compress/gzip"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/profile"
)

// A gzip answer that the caller received whole (compressed, within MaxResponseSize) but
// that inflates past MaxResponseSize is stored with no body at all: the next Do of the
// intent returns the payment's 200 with an empty body (the payment id is gone).
func TestDialectAdversarial2GzipAnswerInflatingPastTheLimitKeepsItsBody(t *testing.T) {
	plain := []byte(`{"id":"pi_123","client_secret":"pi_123_secret","description":"` + strings.Repeat("a", 4000) + `"}`)
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write(plain)
	zw.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(200)
		w.Write(zb.Bytes())
	}))
	defer srv.Close()
	c, err := NewClient(Config{BaseURL: srv.URL, Store: keystore.NewMemory(), Profile: profile.Stripe,
		Policy: Policy{MaxResponseSize: 1024}})
	require.NoError(t, err)
	defer c.Close()
	op := func() *Operation {
		return NewOperation(http.MethodPost, "/v1/payment_intents", []byte(`{"amount":1,"reference":"ord-1"}`),
			WithIntent("ord-1#0"), WithHeader(http.Header{"Accept-Encoding": {"gzip"}}))
	}
	first, err := c.Do(context.Background(), op())
	require.NoError(t, err)
	require.Equal(t, zb.Bytes(), first.Body, "the caller got the answer as sent (%d bytes compressed)", zb.Len())
	again, err := c.Do(context.Background(), op())
	require.NoError(t, err)
	t.Logf("replayed from %s: %d %q %v", again.Source, again.StatusCode, again.Body, again.Header)
	require.NotEmpty(t, again.Body, "the stored answer of a paid intent lost its body")
}
