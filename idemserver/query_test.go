package idemserver_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/idemserver"
)

// The query string is part of the fingerprint, not of the scope: one key sent with another
// query is key reuse (422), never a replay of the first answer under the second request.
// Before, POST /v1/refunds?amount=200 replayed ?amount=100's 201: the caller believed a
// refund of 200 done that never ran.
func TestQueryIsFingerprinted(t *testing.T) {
	mw, err := idemserver.New(idemserver.Config{Backend: idemserver.NewMemory(),
		Tenant: func(*http.Request) (string, error) { return "acct_1", nil }})
	if err != nil {
		t.Fatal(err)
	}
	var execs atomic.Int64
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		execs.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"refunded":"` + r.URL.Query().Get("amount") + `"}`))
	}))
	post := func(target, key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(`{"charge":"ch_1"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for _, step := range []struct {
		target, key string
		code        int
		body        string // a prefix of the answer's body
		replayed    bool
	}{
		{"/v1/refunds?amount=100", "k1", http.StatusCreated, `{"refunded":"100"}`, false},
		{"/v1/refunds?amount=200", "k1", http.StatusUnprocessableEntity, `{"type":"` + idemserver.ProblemKeyReused, false},
		{"/v1/refunds", "k1", http.StatusUnprocessableEntity, `{"type":"` + idemserver.ProblemKeyReused, false},
		{"/v1/refunds?amount=100", "k1", http.StatusCreated, `{"refunded":"100"}`, true},
		{"/v1/refunds", "k2", http.StatusCreated, `{"refunded":""}`, false},
		{"/v1/refunds?", "k2", http.StatusCreated, `{"refunded":""}`, true}, // an empty query is no query
	} {
		rec := post(step.target, step.key)
		replayed := rec.Header().Get(idemserver.ReplayedHeader) == "true"
		if rec.Code != step.code || !strings.HasPrefix(rec.Body.String(), step.body) || replayed != step.replayed {
			t.Errorf("%s key %s: %d replayed=%v %s; want %d replayed=%v %s...", step.target, step.key,
				rec.Code, replayed, rec.Body, step.code, step.replayed, step.body)
		}
	}
	if n := execs.Load(); n != 2 {
		t.Errorf("executed %d times, want 2", n)
	}
}

// A path or tenant that is not valid UTF-8, or holds a NUL byte, cannot be keyed (PostgreSQL
// refuses such text): 400 ProblemScopeInvalid before anything is claimed or run, on every
// backend, where pgserver answered 503 "retry" to every try.
func TestUnkeyableScopeIs400(t *testing.T) {
	for _, tc := range []struct{ target, tenant, want string }{
		{"/v1/pay%FF", "acct_1", "operation"},
		{"/v1/pay%00", "acct_1", "operation"},
		{"/v1/pay", "acct\xff", "tenant"},
		{"/v1/pay", "acct\x00", "tenant"},
		// Too long for a key's row: pgserver's index could not store it and answered 503
		// "retry" for ever (adversarial run).
		{"/v1/" + strings.Repeat("a", idemserver.MaxOperationLength), "acct_1", "tenant (6 bytes) or operation"},
		{"/v1/pay", strings.Repeat("t", idemserver.MaxTenantLength+1), "tenant (256 bytes)"},
	} {
		mw, err := idemserver.New(idemserver.Config{Backend: idemserver.NewMemory(),
			Tenant: func(*http.Request) (string, error) { return tc.tenant, nil }})
		if err != nil {
			t.Fatal(err)
		}
		var execs atomic.Int64
		h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { execs.Add(1) }))
		req := httptest.NewRequest(http.MethodPost, tc.target, strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", "k-1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), idemserver.ProblemScopeInvalid) ||
			!strings.Contains(rec.Body.String(), "the request's "+tc.want) || execs.Load() != 0 {
			t.Errorf("%s tenant %q: %d %s, executed %d", tc.target, tc.tenant, rec.Code, rec.Body, execs.Load())
		}
	}
}

// With a route pattern as the operation, the path's ids are in neither the scope nor (before)
// the fingerprint: POST /v1/customers/cus_B/charges with cus_A's key replayed cus_A's 201
// (adversarial run). The path is fingerprinted now: key reuse, 422.
func TestRoutePatternFingerprintsThePath(t *testing.T) {
	mw, err := idemserver.New(idemserver.Config{Backend: idemserver.NewMemory(),
		Tenant:    func(*http.Request) (string, error) { return "acct_1", nil },
		Operation: func(r *http.Request) string { return r.Method + " " + r.Pattern }})
	if err != nil {
		t.Fatal(err)
	}
	var execs atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("POST /v1/customers/{id}/charges", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		execs.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"customer":"` + r.PathValue("id") + `"}`))
	})))
	post := func(target string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(`{"amount":100}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "k1")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec
	}
	if rec := post("/v1/customers/cus_A/charges"); rec.Code != http.StatusCreated {
		t.Fatalf("cus_A: %d %s", rec.Code, rec.Body)
	}
	if rec := post("/v1/customers/cus_B/charges"); rec.Code != http.StatusUnprocessableEntity ||
		!strings.Contains(rec.Body.String(), idemserver.ProblemKeyReused) {
		t.Fatalf("cus_B under cus_A's key: %d %s, want 422", rec.Code, rec.Body)
	}
	if rec := post("/v1/customers/cus_A/charges"); rec.Code != http.StatusCreated || rec.Header().Get(idemserver.ReplayedHeader) != "true" {
		t.Fatalf("cus_A again: %d replayed=%q", rec.Code, rec.Header().Get(idemserver.ReplayedHeader))
	}
	// A "?" inside the path (%3F) is not the query's: a charge id "ch_1?amount=100" and
	// charge ch_1 with ?amount=100 are two requests (adversarial run).
	mux.Handle("POST /v1/refunds/{charge}", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		execs.Add(1)
		w.WriteHeader(http.StatusCreated)
	})))
	req := httptest.NewRequest(http.MethodPost, "/v1/refunds/ch_1%3Famount=100", strings.NewReader(`{"amount":100}`))
	req.Header.Set("Idempotency-Key", "k2")
	mux.ServeHTTP(httptest.NewRecorder(), req)
	req = httptest.NewRequest(http.MethodPost, "/v1/refunds/ch_1?amount=100", strings.NewReader(`{"amount":100}`))
	req.Header.Set("Idempotency-Key", "k2")
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnprocessableEntity {
		t.Fatalf("charge ch_1 with ?amount=100 under the key of charge \"ch_1?amount=100\": %d replayed=%q, want 422",
			rec.Code, rec.Header().Get(idemserver.ReplayedHeader))
	}
	if n := execs.Load(); n != 2 {
		t.Fatalf("executed %d times, want 2", n)
	}
}

// With the default Operation (method and decoded path), /v1/files/a%2Fb and /v1/files/a/b
// were one scope and one fingerprint, though ServeMux sends them to {name} and
// {dir}/{name}: the second route replayed the first's answer (adversarial run). A path
// escaped otherwise than by default is fingerprinted as sent: 422, never a replay.
func TestEscapedSlashIsNotTheSamePath(t *testing.T) {
	post, execs := routed(t, "POST /v1/files/{name}", "POST /v1/files/{dir}/{name}")
	if rec := post("/v1/files/a%2Fb", "k1"); rec.Code != http.StatusCreated {
		t.Fatalf("a%%2Fb: %d %s", rec.Code, rec.Body)
	}
	if rec := post("/v1/files/a/b", "k1"); rec.Code != http.StatusUnprocessableEntity {
		t.Fatalf("a/b under a%%2Fb's key: %d replayed=%q %s, want 422", rec.Code, rec.Header().Get(idemserver.ReplayedHeader), rec.Body)
	}
	if rec := post("/v1/files/a%2Fb", "k1"); rec.Header().Get(idemserver.ReplayedHeader) != "true" {
		t.Fatalf("a%%2Fb again: %d, not a replay", rec.Code)
	}
	if n := execs(); n != 1 {
		t.Fatalf("executed %d times, want 1", n)
	}
	// What the fingerprint covers: a plain path, or one escaped as by default, adds nothing
	// to the operation (fingerprints stored before stay valid); a%2Fb adds the path as sent.
	var ops []string
	fmw, err := idemserver.New(idemserver.Config{Backend: idemserver.NewMemory(),
		Tenant: func(*http.Request) (string, error) { return "acct_1", nil },
		Fingerprint: func(method, op string, body []byte) []byte {
			ops = append(ops, op)
			return idemserver.Fingerprint(method, op, body)
		}})
	if err != nil {
		t.Fatal(err)
	}
	h := fmw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for i, target := range []string{"/v1/files/a", "/v1/files/a%20b", "/v1/files/a%2Fb"} {
		req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", fmt.Sprint("f", i))
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	want := []string{"POST /v1/files/a", "POST /v1/files/a b", "POST /v1/files/a/b /v1/files/a%2Fb"}
	if !slices.Equal(ops, want) {
		t.Fatalf("fingerprinted operations %q, want %q", ops, want)
	}
}

// ServeMux routes "POST a.example/v1/orders" and "POST b.example/v1/orders" to different
// handlers, but the default Operation (method and path) made them one scope and one
// fingerprint: b's request replayed a's answer (adversarial run). When the pattern that
// matched names a host, the host is fingerprinted: 422.
func TestHostRoutedRequestsAreNotOneRequest(t *testing.T) {
	post, execs := routed(t, "POST a.example/v1/orders", "POST b.example/v1/orders", "POST /v1/plain")
	if rec := post("http://a.example/v1/orders", "k1"); rec.Code != http.StatusCreated {
		t.Fatalf("a.example: %d %s", rec.Code, rec.Body)
	}
	if rec := post("http://b.example/v1/orders", "k1"); rec.Code != http.StatusUnprocessableEntity {
		t.Fatalf("b.example under a.example's key: %d replayed=%q %s, want 422", rec.Code, rec.Header().Get(idemserver.ReplayedHeader), rec.Body)
	}
	if rec := post("http://a.example/v1/orders", "k1"); rec.Header().Get(idemserver.ReplayedHeader) != "true" {
		t.Fatalf("a.example again: %d, not a replay", rec.Code)
	}
	// A pattern without a host: the host is not part of the request's identity.
	if rec := post("http://a.example/v1/plain", "k2"); rec.Code != http.StatusCreated {
		t.Fatalf("plain: %d", rec.Code)
	}
	if rec := post("http://b.example/v1/plain", "k2"); rec.Header().Get(idemserver.ReplayedHeader) != "true" {
		t.Fatalf("plain route on another host: %d, not a replay", rec.Code)
	}
	if n := execs(); n != 2 {
		t.Fatalf("executed %d times, want 2", n)
	}
}

// routed serves patterns on a ServeMux, each through one middleware (Memory backend, one
// tenant, the default Operation) around a handler that answers 201 with the pattern, and
// returns a poster (a POST with key) and the count of executions.
func routed(t *testing.T, patterns ...string) (post func(target, key string) *httptest.ResponseRecorder, execs func() int64) {
	mw, err := idemserver.New(idemserver.Config{Backend: idemserver.NewMemory(),
		Tenant: func(*http.Request) (string, error) { return "acct_1", nil }})
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	mux := http.NewServeMux()
	for _, pattern := range patterns {
		mux.Handle(pattern, mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"route":"` + r.Pattern + `"}`))
		})))
	}
	post = func(target, key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(`{"item":1}`))
		req.Header.Set("Idempotency-Key", key)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec
	}
	return post, n.Load
}
