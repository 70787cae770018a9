package idemstripe

import (
	"bytes"
	"context"
	"fmt"
	"go/build"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests run stripe-go against stripe-mock (github.com/stripe/stripe-mock), started once
// for the package on a Unix socket in a temporary directory (no TCP port at all), with a
// fault proxy (an httptest server on 127.0.0.1) in between.

const installMock = "go install github.com/stripe/stripe-mock@v0.203.0"

var (
	mockSock string // the running stripe-mock's socket, "" when none
	mockErr  error  // why none runs
)

func TestMain(m *testing.M) {
	stop, err := startMock()
	if err != nil {
		mockErr = err
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

// needMock fails the test under CI (CI=true), where stripe-mock must run, and skips it
// elsewhere, naming the install command.
func needMock(t *testing.T) {
	t.Helper()
	if mockSock != "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("stripe-mock is required under CI: %v (install: %s)", mockErr, installMock)
	}
	t.Skipf("stripe-mock not available (%v); install it with: %s", mockErr, installMock)
}

// findMock looks for the stripe-mock binary on PATH, in $GOBIN and in each $GOPATH/bin.
func findMock() (string, error) {
	if p, err := exec.LookPath("stripe-mock"); err == nil {
		return p, nil
	}
	var dirs []string
	if gobin := os.Getenv("GOBIN"); gobin != "" {
		dirs = append(dirs, gobin)
	}
	for _, gp := range filepath.SplitList(build.Default.GOPATH) {
		dirs = append(dirs, filepath.Join(gp, "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "stripe-mock")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("stripe-mock not on PATH nor in %s", strings.Join(dirs, ", "))
}

func startMock() (stop func(), err error) {
	bin, err := findMock()
	if err != nil {
		return func() {}, err
	}
	dir, err := os.MkdirTemp("", "stripe-mock")
	if err != nil {
		return func() {}, err
	}
	sock := filepath.Join(dir, "mock.sock")
	cmd := exec.Command(bin, "-http-unix", sock)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return func() {}, err
	}
	stop = func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		os.RemoveAll(dir)
	}
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			mockSock = sock
			return stop, nil
		}
	}
	stop()
	return func() {}, fmt.Errorf("stripe-mock did not listen on %s within 15s: %s", sock, out.String())
}

// fault is what the proxy does with one request.
type fault int

const (
	pass           fault = iota // forward to stripe-mock, return its answer
	after500                    // forward, then answer 500 (an api_error body) instead
	dropAfter                   // forward, then close the connection without an answer
	busy503                     // answer 503 with Retry-After: 1, not forwarded
	stored500                   // answer a stored 500 (Idempotent-Replayed: true), not forwarded
	idempotencyErr              // answer Stripe's 400 idempotency_error, not forwarded
)

// proxy sits between stripe-go (over idem) and stripe-mock. It counts the sends of every
// Idempotency-Key and keeps each send's Authorization header.
type proxy struct {
	*httptest.Server
	fwd *http.Client

	mu     sync.Mutex
	script []fault // one per request, in order; then always
	always fault
	sends  map[string]int
	keys   []string // each send's key, in order ("" for none)
	auth   []string // each send's Authorization
	posts  int      // POST requests seen, with or without a key
}

func newProxy(t *testing.T) *proxy {
	t.Helper()
	needMock(t)
	p := &proxy{sends: map[string]int{}}
	p.fwd = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", mockSock)
		},
	}}
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.Close)
	return p
}

// then scripts the next requests' faults; always sets the fault after the script.
func (p *proxy) then(fs ...fault) *proxy {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.script = append(p.script, fs...)
	return p
}

func (p *proxy) setAlways(f fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.always = f
}

func (p *proxy) count(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sends[key]
}

func (p *proxy) sent() (keys, auth []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.keys...), append([]string(nil), p.auth...)
}

func (p *proxy) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key := r.Header.Get("Idempotency-Key")
	p.mu.Lock()
	f := p.always
	if len(p.script) > 0 {
		f, p.script = p.script[0], p.script[1:]
	}
	if r.Method == http.MethodPost {
		p.posts++
	}
	p.sends[key]++
	p.keys = append(p.keys, key)
	p.auth = append(p.auth, r.Header.Get("Authorization"))
	p.mu.Unlock()

	switch f {
	case busy503:
		w.Header().Set("Retry-After", "1")
		stripeError(w, http.StatusServiceUnavailable, nil, `{"error":{"type":"api_error","message":"busy, retry later"}}`)
		return
	case stored500:
		stripeError(w, http.StatusInternalServerError, http.Header{"Idempotent-Replayed": {"true"}, "Idempotency-Key": {key}},
			`{"error":{"type":"api_error","message":"An unknown error occurred"}}`)
		return
	case idempotencyErr:
		stripeError(w, http.StatusBadRequest, nil,
			`{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters they were first used with."}}`)
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://stripe-mock"+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	res, err := p.fwd.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	resBody, _ := io.ReadAll(res.Body)
	res.Body.Close()
	switch f {
	case after500:
		stripeError(w, http.StatusInternalServerError, nil, `{"error":{"type":"api_error","message":"An unknown error occurred"}}`)
		return
	case dropAfter:
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	for k, vs := range res.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(res.StatusCode)
	_, _ = w.Write(resBody)
}

func stripeError(w http.ResponseWriter, status int, h http.Header, body string) {
	for k, vs := range h {
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_proxy")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}
