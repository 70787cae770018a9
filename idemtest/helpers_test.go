package idemtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// reply is what a plain http.Client got back.
type reply struct {
	status int
	header http.Header
	body   []byte
	err    error
}

func (r reply) replayed() bool { return r.header.Get(ReplayedHeader) == "true" }

// errorCode is the "error" field of a JSON error body.
func (r reply) errorCode(t *testing.T) string {
	t.Helper()
	var e struct{ Error string }
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("body %q is not JSON: %v", r.body, err)
	}
	return e.Error
}

// newClient returns a plain client that never reuses connections, so that the transport
// cannot silently replay a request after a reset (a hidden replay).
func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
}

// call is one request to the server.
type call struct {
	method string // default POST
	path   string // default PaymentsPath
	key    string // Idempotency-Key value as sent; "" sends none
	tenant string // Authorization value; "" sends none
	body   string
}

func do(t *testing.T, base string, c call) reply {
	t.Helper()
	return doClient(t, newClient(), base, c)
}

func doClient(t *testing.T, client *http.Client, base string, c call) reply {
	t.Helper()
	if c.method == "" {
		c.method = http.MethodPost
	}
	if c.path == "" {
		c.path = PaymentsPath
	}
	var body io.Reader
	if c.body != "" {
		body = bytes.NewReader([]byte(c.body))
	}
	req, err := http.NewRequest(c.method, base+c.path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.GetBody = nil // no transport-level replays
	if c.key != "" {
		req.Header.Set(DefaultKeyHeader, c.key)
	}
	if c.tenant != "" {
		req.Header.Set("Authorization", c.tenant)
	}
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b, err: err}
}

// status GETs the status endpoint for key.
func status(t *testing.T, base, tenant, key string) reply {
	t.Helper()
	return do(t, base, call{method: http.MethodGet, path: KeyStatusPath(key), tenant: tenant})
}

func paymentBody(amount int, ref string) string {
	return fmt.Sprintf(`{"amount":%d,"currency":"EUR","customer":"cus_1","reference":%q}`, amount, ref)
}

// eventually polls cond every millisecond for up to two seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func newTestServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	s := NewServer(cfg)
	t.Cleanup(s.Close)
	return s
}

func wantStatus(t *testing.T, r reply, want int) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("want status %d, got error %v", want, r.err)
	}
	if r.status != want {
		t.Fatalf("status = %d, want %d (body %s)", r.status, want, r.body)
	}
}

func wantInt(t *testing.T, what string, got, want int) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %d, want %d", what, got, want)
	}
}
