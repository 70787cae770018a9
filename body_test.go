package idem

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
)

// bodySeen is what a server saw of one attempt's request body.
type bodySeen struct {
	length   string // Content-Length header
	chunked  bool
	body     []byte // nil when the server answered without reading it
	readBody bool
}

// TestRequestBodyOnEveryAttempt: every attempt carries the byte-identical body with its
// Content-Length, including attempts after ones the server answered before reading the body
// (net/http may still be writing that body when the next attempt starts: under -race, a reader
// shared between attempts would be reported).
func TestRequestBodyOnEveryAttempt(t *testing.T) {
	for _, tc := range []struct {
		name string
		body []byte
		// early: the attempts the server answers 503 without reading the body
		early int
	}{
		{"small", paymentBody(1250, "order-b1"), 0},
		{"large, early answers", bytes.Repeat([]byte("x"), 1<<20), 2},
		{"empty", nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var seen []bodySeen
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				n := len(seen)
				mu.Unlock()
				s := bodySeen{length: r.Header.Get("Content-Length"), chunked: len(r.TransferEncoding) > 0}
				if n >= tc.early {
					b, err := io.ReadAll(r.Body)
					require.NoError(t, err)
					s.body, s.readBody = b, true
				}
				mu.Lock()
				seen = append(seen, s)
				mu.Unlock()
				if n < tc.early+1 {
					w.Header().Set("Retry-After", "0")
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				w.WriteHeader(http.StatusCreated)
			}))
			defer srv.Close()
			clock := newFakeClock()
			c, err := NewClient(Config{BaseURL: srv.URL, Store: keystore.NewMemory(), Now: clock.Now, Sleep: clock.Sleep,
				Budget: BudgetConfig{Disabled: true}})
			require.NoError(t, err)
			defer c.Close()

			res, err := c.Do(context.Background(), NewOperation(http.MethodPost, "/v1/payments", tc.body))
			require.NoError(t, err)
			assert.Equal(t, http.StatusCreated, res.StatusCode)
			want := tc.early + 2
			assert.Equal(t, want, res.Attempts)
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, seen, want)
			for i, s := range seen {
				// An empty body goes out chunked (a 0-byte chunk): net/http cannot announce a
				// length of 0 for a body that must stay non-nil to be non-replayable.
				if len(tc.body) > 0 {
					assert.Equal(t, strconv.Itoa(len(tc.body)), s.length, "attempt %d Content-Length", i+1)
					assert.False(t, s.chunked, "attempt %d chunked", i+1)
				}
				if s.readBody {
					assert.True(t, bytes.Equal(tc.body, s.body), "attempt %d body: %d bytes, want %d", i+1, len(s.body), len(tc.body))
				}
			}
		})
	}
}

// bodyTypes answers 503 then 201 and keeps the type of every attempt's request body.
type bodyTypes struct {
	mu    sync.Mutex
	types []string // reflect type names
}

func (b *bodyTypes) RoundTrip(r *http.Request) (*http.Response, error) {
	b.mu.Lock()
	b.types = append(b.types, reflect.TypeOf(r.Body).String())
	n := len(b.types)
	b.mu.Unlock()
	_, _ = io.Copy(io.Discard, r.Body)
	_ = r.Body.Close()
	code := http.StatusCreated
	hdr := http.Header{}
	if n == 1 {
		code = http.StatusServiceUnavailable
		hdr.Set("Retry-After", "0")
	}
	return &http.Response{StatusCode: code, Header: hdr, Body: http.NoBody, Request: r}, nil
}

// TestRequestBodyIsKnownInMemory: every attempt's body reaches the transport as
// io.NopCloser(*bytes.Reader), a type net/http knows to be in memory, so it writes headers and
// body in one write; for any other type it flushes the headers alone first, a second write
// syscall on every request.
func TestRequestBodyIsKnownInMemory(t *testing.T) {
	rt := &bodyTypes{}
	clock := newFakeClock()
	c, err := NewClient(Config{BaseURL: "http://api.example", HTTPClient: &http.Client{Transport: rt},
		Store: keystore.NewMemory(), Now: clock.Now, Sleep: clock.Sleep, Budget: BudgetConfig{Disabled: true}})
	require.NoError(t, err)
	defer c.Close()

	res, err := c.Do(context.Background(), NewOperation(http.MethodPost, "/v1/payments", paymentBody(1250, "order-b2")))
	require.NoError(t, err)
	require.Equal(t, 2, res.Attempts)
	want := reflect.TypeOf(io.NopCloser(bytes.NewReader(nil))).String() // io.nopCloserWriterTo
	rt.mu.Lock()
	defer rt.mu.Unlock()
	assert.Equal(t, []string{want, want}, rt.types)
}
