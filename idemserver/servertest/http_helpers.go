package servertest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/idemserver"
)

// server is the payments handler of the suite behind the middleware.
type server struct {
	*httptest.Server
	mw    *idemserver.Middleware
	clock *Clock
	execs atomic.Int64
	gate  chan struct{} // when set, every execution waits for it to close
	entry chan struct{} // when set, receives once per execution that reached the gate
}

// tenantOf is the suite's authentication: "Bearer acct_X" is tenant acct_X.
func tenantOf(r *http.Request) (string, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return "", errors.New("unauthenticated")
	}
	return tok, nil
}

func newServer(t *testing.T, b idemserver.Backend, mod func(*idemserver.Config), h http.HandlerFunc) *server {
	t.Helper()
	s := &server{clock: NewClock()}
	cfg := idemserver.Config{Backend: b, Tenant: tenantOf, Now: s.clock.Now}
	if mod != nil {
		mod(&cfg)
	}
	mw, err := idemserver.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	s.mw = mw
	if h == nil {
		h = s.pay
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/payments", mw.Handler(h))
	mux.Handle("GET /v1/payments/operations/{key}", mw.KeyStatusHandler("POST /v1/payments", nil))
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// pay validates {"amount":N} (N <= 0 is refused before execution), then executes: counts,
// and answers 201 with headers that test the allow-list.
func (s *server) pay(w http.ResponseWriter, r *http.Request) {
	var p struct {
		Amount int `json:"amount"`
	}
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.Amount <= 0 {
		_ = idemserver.NotExecuted(r)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":"invalid_amount"}`)
		return
	}
	if s.entry != nil {
		s.entry <- struct{}{}
	}
	if s.gate != nil {
		<-s.gate
	}
	n := s.execs.Add(1)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/v1/payments/ch_%d", n))
	w.Header().Set("Set-Cookie", "session=secret")
	w.Header().Set("X-Request-Id", fmt.Sprintf("req_%d", n))
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":"ch_%d","amount":%d}`, n, p.Amount)
}

type answer struct {
	status int
	header http.Header
	body   string
}

func (s *server) post(t *testing.T, tenant, key, body string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+"/v1/payments", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if tenant != "" {
		req.Header.Set("Authorization", "Bearer "+tenant)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return s.do(t, req)
}

func (s *server) status(t *testing.T, tenant, key string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.URL+"/v1/payments/operations/"+key, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tenant)
	return s.do(t, req)
}

func (s *server) do(t *testing.T, req *http.Request) answer {
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", req.Method, req.URL, err)
		return answer{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("read body: %v", err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func wantAnswer(t *testing.T, what string, got answer, status int, body string) {
	t.Helper()
	if got.status != status || got.body != body {
		t.Fatalf("%s: got %d %s; want %d %s", what, got.status, got.body, status, body)
	}
}

func problem(t *testing.T, a answer) idemserver.Problem {
	t.Helper()
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json (body %s)", ct, a.body)
	}
	var p idemserver.Problem
	dec := json.NewDecoder(bytes.NewReader([]byte(a.body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("problem body %s: %v", a.body, err)
	}
	if p.Status != a.status {
		t.Fatalf("problem status %d, HTTP %d", p.Status, a.status)
	}
	return p
}
