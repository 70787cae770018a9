package idem

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func getThrough(t *testing.T, ctx context.Context, c *Client, tr *Transport) (*http.Response, error) {
	t.Helper()
	if tr == nil {
		tr = &Transport{Client: c}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.cfg.BaseURL+"/v1/payments/pay_1", nil)
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if resp != nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	return resp, err
}

// A safe request's retries follow the Policy, as an operation's do: the backoff and
// Retry-After waits go through Config.Sleep, a Retry-After beyond MaxRetryAfter ends the
// retries at once with the answer as it is, and MaxAttempts and MaxElapsed bound them.
func TestTransportSafeRetriesFollowThePolicy(t *testing.T) {
	t.Run("Retry-After within the cap", func(t *testing.T) {
		h := &scripted{codes: []int{503}, retryAfter: "2"}
		c, clock, _ := scriptedClient(t, h, nil)
		resp, err := getThrough(t, context.Background(), c, nil)
		require.NoError(t, err)
		assert.Equal(t, http.StatusCreated, resp.StatusCode)
		assert.Equal(t, int64(2), h.n.Load())
		assert.Equal(t, []time.Duration{2 * time.Second}, clock.sleeps)
	})
	t.Run("Retry-After beyond the cap", func(t *testing.T) {
		h := &scripted{codes: []int{503, 503}, retryAfter: "3600"}
		c, clock, _ := scriptedClient(t, h, nil)
		resp, err := getThrough(t, context.Background(), c, nil)
		require.NoError(t, err)
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		assert.Equal(t, int64(1), h.n.Load())
		assert.Empty(t, clock.sleeps)
	})
	t.Run("per-call MaxRetryAfter from the context", func(t *testing.T) {
		h := &scripted{codes: []int{429}, retryAfter: "2"}
		c, clock, _ := scriptedClient(t, h, nil)
		ctx := ContextWithCallOptions(context.Background(), CallMaxRetryAfter(time.Second))
		resp, err := getThrough(t, ctx, c, nil)
		require.NoError(t, err)
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		assert.Equal(t, int64(1), h.n.Load())
		assert.Empty(t, clock.sleeps)
	})
	t.Run("backoff within bounds, MaxAttempts", func(t *testing.T) {
		h := &scripted{codes: []int{502, 502, 502, 502, 502, 502}}
		c, clock, _ := scriptedClient(t, h, nil)
		tr := &Transport{Client: c, CallOptions: []CallOption{CallMaxAttempts(4), CallBackoff(100*time.Millisecond, 2, NoJitter, time.Second)}}
		resp, err := getThrough(t, context.Background(), c, tr)
		require.NoError(t, err)
		assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
		assert.Equal(t, int64(4), h.n.Load())
		assert.Equal(t, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}, clock.sleeps)
	})
	t.Run("MaxElapsed", func(t *testing.T) {
		h := &scripted{codes: []int{502, 502, 502, 502, 502, 502}}
		c, clock, _ := scriptedClient(t, h, nil)
		tr := &Transport{Client: c, CallOptions: []CallOption{CallMaxElapsed(time.Second),
			CallBackoff(400*time.Millisecond, 2, NoJitter, 10*time.Second)}}
		resp, err := getThrough(t, context.Background(), c, tr)
		require.NoError(t, err)
		assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
		// 400 ms, then 800 ms would pass the second: two requests.
		assert.Equal(t, int64(2), h.n.Load())
		assert.Equal(t, []time.Duration{400 * time.Millisecond}, clock.sleeps)
	})
}

// Each attempt of a safe request ends at its AttemptTimeout: a server that never answers
// costs MaxAttempts timeouts, not the caller's whole deadline.
func TestTransportSafeAttemptTimeout(t *testing.T) {
	var hits atomic.Int32
	release := make(chan struct{})
	defer close(release)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	c, _, _ := scriptedClient(t, h, nil)
	tr := &Transport{Client: c, CallOptions: []CallOption{CallMaxAttempts(2), CallAttemptTimeout(50 * time.Millisecond)}}
	_, err := getThrough(t, context.Background(), c, tr)
	require.Error(t, err)
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	assert.Equal(t, int32(2), hits.Load())
}

// A request with a nil Header given to RoundTrip directly (http.Client fills one in) made
// Credentials' Header.Set panic on a nil map (adversarial run): the safe path sends it with
// an empty header, as the operation path does.
func TestTransportSafeNilHeaderWithCredentials(t *testing.T) {
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = append(auth, r.Header.Get("Authorization"))
	}))
	defer srv.Close()
	c, err := NewClient(Config{BaseURL: srv.URL,
		Credentials: func(r *http.Request) error { r.Header.Set("Authorization", "Bearer sk"); return nil }})
	require.NoError(t, err)
	defer c.Close()
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		req, err := http.NewRequest(method, srv.URL+"/v1/payments/ch_1", nil)
		require.NoError(t, err)
		req.Header = nil
		resp, err := (&Transport{Client: c}).RoundTrip(req)
		require.NoError(t, err, method)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, http.StatusOK, resp.StatusCode, method)
	}
	assert.Equal(t, []string{"Bearer sk", "Bearer sk"}, auth)
}
