package idem

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

// A local key conflict says which part of the request differs from the one the key is bound
// to: the method, the URL (as sent, normalised under BaseURL) or the body. Nothing is sent.
func TestKeyConflictSaysWhatDiffers(t *testing.T) {
	body := []byte(`{"amount":5}`)
	for _, tc := range []struct {
		name   string
		method string
		url    string
		body   []byte
		want   string
	}{
		{"body", http.MethodPost, "/v1/payments", []byte(`{"amount":6}`), ": the body differs; "},
		{"method", http.MethodPut, "/v1/payments", body, ": the method differs; "},
		{"url", http.MethodPost, "/v1/refunds", body, ": the URL differs; "},
		{"url and body", http.MethodPost, "/v1/refunds", []byte(`{}`), ": the URL and the body differ; "},
		{"all", http.MethodPatch, "/v1/refunds", []byte(`{}`), ": the method, the URL and the body differ; "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := keystore.NewMemory()
			now := time.Now()
			require.NoError(t, store.Create(context.Background(), &keystore.Record{Key: "k-1",
				Fingerprint: Fingerprint(http.MethodPost, "/v1/payments", body), State: keystore.StateSucceeded,
				Request:  keystore.Request{Method: http.MethodPost, URL: "/v1/payments", Body: body},
				Response: &keystore.Response{StatusCode: 201}, CreatedAt: now, UpdatedAt: now}))
			c, err := NewClient(Config{BaseURL: "https://api.example.com", Store: store})
			require.NoError(t, err)
			defer c.Close()
			_, err = c.Do(context.Background(), NewOperation(tc.method, tc.url, tc.body, WithKey("k-1")))
			require.ErrorIs(t, err, ErrKeyConflict)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "that request succeeded: it is paid, do not pay it again")
			assert.Equal(t, int64(0), c.Stats().Attempts, "nothing sent")
		})
	}
	// The same request (a URL spelled another way under BaseURL) is no conflict.
	store := keystore.NewMemory()
	now := time.Now()
	require.NoError(t, store.Create(context.Background(), &keystore.Record{Key: "k-1",
		Fingerprint: Fingerprint(http.MethodPost, "/v1/payments", body), State: keystore.StateSucceeded,
		Request:  keystore.Request{Method: http.MethodPost, URL: "/v1/payments", Body: body},
		Response: &keystore.Response{StatusCode: 201}, CreatedAt: now, UpdatedAt: now}))
	c, err := NewClient(Config{BaseURL: "https://api.example.com", Store: store})
	require.NoError(t, err)
	defer c.Close()
	res, err := c.Do(context.Background(), NewOperation(http.MethodPost, "v1/payments", body, WithKey("k-1")))
	require.NoError(t, err)
	assert.Equal(t, outcome.SourceStore, res.Source)
}
