package idem

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/profile"
)

const secret = "pi_123_secret_abc"

func storedBodies(t *testing.T, store keystore.Store) [][]byte {
	recs, err := store.List(context.Background(), keystore.StateSucceeded, keystore.StateFailed, keystore.StateManual, keystore.StatePending)
	require.NoError(t, err)
	var out [][]byte
	for _, r := range recs {
		if r.Response != nil {
			out = append(out, r.Response.Body)
		}
	}
	return out
}

func gunzipAll(b []byte) []byte {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return b
	}
	out, _ := io.ReadAll(zr)
	return out
}

// The operation asks for a compressed answer (its own Accept-Encoding): net/http then hands
// the gzip bytes over as they are, redaction sees no JSON, and the client_secret is stored.
func TestDialectAdversarialRedactGzipAnswerStoresNoSecret(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(200)
		zw := gzip.NewWriter(w)
		zw.Write([]byte(`{"id":"pi_123","client_secret":"` + secret + `"}`))
		zw.Close()
	}))
	defer srv.Close()
	store := keystore.NewMemory()
	c, err := NewClient(Config{BaseURL: srv.URL, Store: store, Profile: profile.Stripe})
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Do(context.Background(), payment(100, "ord-1", WithHeader(http.Header{"Accept-Encoding": {"gzip"}})))
	require.NoError(t, err)
	for _, b := range storedBodies(t, store) {
		require.NotContains(t, string(gunzipAll(b)), secret, "stored body holds the client_secret")
	}
}
