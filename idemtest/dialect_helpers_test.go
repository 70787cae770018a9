package idemtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is an injectable Config.Now that tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// dialectServer starts a server speaking name on a fake clock.
func dialectServer(t *testing.T, name string, cfg Config) (*Server, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	cfg.Dialect, cfg.Now = name, clk.Now
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = -1
	}
	return newTestServer(t, cfg), clk
}

// dialectBody is the payment body for name, with key in it for square.
func dialectBody(name, key string, amount int, ref string) string {
	if name == DialectSquare {
		return fmt.Sprintf(`{"idempotency_key":%q,"amount":%d,"currency":"EUR","customer":"cus_1","reference":%q}`, key, amount, ref)
	}
	return paymentBody(amount, ref)
}

// pay POSTs a payment with key on name's carrier.
func pay(t *testing.T, s *Server, name, key string, amount int, ref string) reply {
	t.Helper()
	header := KeyCarrier(name)
	if strings.HasPrefix(header, "body:") {
		header = ""
	}
	return raw(t, s.URL, http.MethodPost, PaymentsPath, header, key, dialectBody(name, key, amount, ref))
}

// raw sends one request with an optional key header and body, on a fresh connection.
func raw(t *testing.T, base, method, path, header, key, body string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = bytes.NewReader([]byte(body))
	}
	req, err := http.NewRequest(method, base+path, rd)
	require.NoError(t, err)
	req.GetBody = nil
	if header != "" {
		req.Header.Set(header, key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := newClient().Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b, err: err}
}

// get sends a GET without a key.
func get(t *testing.T, s *Server, path string) reply {
	t.Helper()
	return raw(t, s.URL, http.MethodGet, path, "", "", "")
}

// at returns the value at a dotted path ("error.errors.0.links.conflicting_resource_id") of
// a JSON body, or nil.
func at(t *testing.T, body []byte, path string) any {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(body, &v), "body %s", body)
	for _, part := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			v = x[part]
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// dataIDs returns the ids of a {"data":[...]} body.
func dataIDs(t *testing.T, body []byte) []string {
	t.Helper()
	var d struct{ Data []payment }
	require.NoError(t, json.Unmarshal(body, &d), "body %s", body)
	ids := []string{}
	for _, p := range d.Data {
		ids = append(ids, p.ID)
	}
	return ids
}

// charge decodes a payment body.
func chargeOf(t *testing.T, r reply) payment {
	t.Helper()
	require.NoError(t, r.err)
	var p payment
	require.NoError(t, json.Unmarshal(r.body, &p), "body %s", r.body)
	return p
}
