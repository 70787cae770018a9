package idemserver_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemserver"
)

// TestStatusBodies: the status endpoint embeds a JSON body as is, any other body as a JSON
// string, and omits an empty one; a missing key is 400.
func TestStatusBodies(t *testing.T) {
	mw, err := idemserver.New(idemserver.Config{Backend: idemserver.NewMemory(),
		Tenant: func(*http.Request) (string, error) { return "acct_1", nil }})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("kind") {
		case "empty":
			w.WriteHeader(http.StatusNoContent)
		case "text":
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "ok \"quoted\"")
		}
	}))
	status := mw.KeyStatusHandler("POST /pay", func(r *http.Request) string { return r.URL.Query().Get("key") })
	for _, tc := range []struct{ kind, want string }{
		{"empty", `{"status":"completed","response_status":204}`},
		{"text", `{"status":"completed","response_status":201,"response_body":"ok \"quoted\""}`},
	} {
		req := httptest.NewRequest(http.MethodPost, "/pay?kind="+tc.kind, strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "k-"+tc.kind)
		h.ServeHTTP(httptest.NewRecorder(), req)
		// Operation defaults to method and path: "POST /pay".
		rec := httptest.NewRecorder()
		status.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status?key=k-"+tc.kind, nil))
		if rec.Code != 200 || rec.Body.String() != tc.want {
			t.Errorf("%s: %d %s, want 200 %s", tc.kind, rec.Code, rec.Body, tc.want)
		}
	}
	rec := httptest.NewRecorder()
	status.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status", nil))
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), idemserver.ProblemKeyInvalid) {
		t.Errorf("no key: %d %s", rec.Code, rec.Body)
	}
}

// A status route whose wildcard is not named {key} answered 400 "invalid idempotency key:
// empty", not saying where the key was looked for (newcomer run). The detail names the path
// value and the header.
func TestStatusWithoutAKeySaysWhereItLooked(t *testing.T) {
	mw, err := idemserver.New(idemserver.Config{Backend: idemserver.NewMemory(),
		Tenant: func(*http.Request) (string, error) { return "acct_1", nil }})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /v1/payments/operations/{k}", mw.KeyStatusHandler("POST /v1/payments", nil))
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/payments/operations/k1", nil))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "path value {key} and the Idempotency-Key header are both empty") {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}
