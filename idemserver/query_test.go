package idemserver_test

import (
	"net/http"
	"net/http/httptest"
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
