package idemserver_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/idemserver"
)

// hooked is a middleware with every hook of this file set, over a handler that counts its
// executions and can be held in progress.
type hooked struct {
	mw       *idemserver.Middleware
	h        http.Handler
	status   http.Handler
	executed atomic.Int64
	problems []idemserver.Problem
}

func newHooked(t *testing.T, hold chan struct{}, started chan struct{}) *hooked {
	t.Helper()
	hk := &hooked{}
	mw, err := idemserver.New(idemserver.Config{
		Backend:    idemserver.NewMemory(),
		Tenant:     func(*http.Request) (string, error) { return "acct_1", nil },
		RetryAfter: -1,
		// Byte-exact fingerprint: a test server that catches clients re-encoding bodies.
		Fingerprint: func(method, op string, body []byte) []byte {
			s := sha256.Sum256([]byte(method + "\x00" + op + "\x00" + string(body)))
			return s[:]
		},
		WriteProblem: func(w http.ResponseWriter, r *http.Request, p idemserver.Problem) {
			hk.problems = append(hk.problems, p)
			if p.Type == idemserver.ProblemKeyMissing { // the default rendering, for one kind
				idemserver.WriteProblemJSON(w, p)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(p.Status)
			fmt.Fprintf(w, `{"error":%q}`, p.Type[strings.LastIndex(p.Type, "/")+1:])
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	hk.mw = mw
	hk.h = mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hk.executed.Add(1)
		if hold != nil {
			close(started)
			<-hold
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"x"}`)
	}))
	hk.status = mw.KeyStatusHandler("POST /pay", func(r *http.Request) string { return r.URL.Query().Get("key") })
	return hk
}

func (hk *hooked) post(key, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	rec := httptest.NewRecorder()
	hk.h.ServeHTTP(rec, req)
	return rec
}

// Config.Fingerprint replaces the canonical fingerprint: with a byte-exact one, the same JSON
// with other whitespace is key reuse (422), where the default would replay it.
func TestFingerprintHook(t *testing.T) {
	hk := newHooked(t, nil, nil)
	if rec := hk.post("k", `{"a":1}`); rec.Code != http.StatusCreated {
		t.Fatalf("first: %d %s", rec.Code, rec.Body)
	}
	if rec := hk.post("k", `{"a":1}`); rec.Code != http.StatusCreated || rec.Header().Get(idemserver.ReplayedHeader) != "true" {
		t.Errorf("same bytes: %d replayed=%q", rec.Code, rec.Header().Get(idemserver.ReplayedHeader))
	}
	rec := hk.post("k", `{"a": 1}`)
	if rec.Code != http.StatusUnprocessableEntity || rec.Body.String() != `{"error":"idempotency-key-reused"}` {
		t.Errorf("other bytes: %d %s, want 422 in the API's own format", rec.Code, rec.Body)
	}
	if n := hk.executed.Load(); n != 1 {
		t.Errorf("executed %d times", n)
	}
}

// Config.WriteProblem renders every problem the middleware and the status endpoint give,
// with the headers already set; WriteProblemJSON is the default rendering.
func TestWriteProblemHook(t *testing.T) {
	hold, started := make(chan struct{}), make(chan struct{})
	hk := newHooked(t, hold, started)
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- hk.post("busy", `{}`) }()
	<-started

	busy := hk.post("busy", `{}`)
	if busy.Code != http.StatusConflict || busy.Body.String() != `{"error":"idempotency-key-in-progress"}` ||
		busy.Header().Get("Retry-After") != "0" {
		t.Errorf("409: %d %s Retry-After %q", busy.Code, busy.Body, busy.Header().Get("Retry-After"))
	}
	st := httptest.NewRecorder()
	hk.status.ServeHTTP(st, httptest.NewRequest(http.MethodGet, "/s?key=busy", nil))
	if st.Code != http.StatusAccepted || st.Header().Get("Retry-After") != "0" {
		t.Errorf("status while processing: %d Retry-After %q (a negative RetryAfter sends 0)", st.Code, st.Header().Get("Retry-After"))
	}
	close(hold)
	if first := <-done; first.Code != http.StatusCreated {
		t.Errorf("first: %d", first.Code)
	}

	missing := hk.post("", `{}`)
	var p idemserver.Problem
	if err := json.Unmarshal(missing.Body.Bytes(), &p); err != nil || p.Type != idemserver.ProblemKeyMissing ||
		missing.Header().Get("Content-Type") != "application/problem+json" || missing.Code != http.StatusBadRequest {
		t.Errorf("missing key via WriteProblemJSON: %d %q %s", missing.Code, missing.Header().Get("Content-Type"), missing.Body)
	}
	bad := httptest.NewRecorder()
	hk.status.ServeHTTP(bad, httptest.NewRequest(http.MethodGet, "/s?key=a%20b", nil))
	if bad.Code != http.StatusBadRequest || bad.Body.String() != `{"error":"idempotency-key-invalid"}` {
		t.Errorf("status with an invalid key: %d %s", bad.Code, bad.Body)
	}
	var types []string
	for _, p := range hk.problems {
		types = append(types, p.Type[strings.LastIndex(p.Type, "/")+1:])
	}
	if got := strings.Join(types, ","); got != "idempotency-key-in-progress,idempotency-key-missing,idempotency-key-invalid" {
		t.Errorf("problems seen by the hook: %s", got)
	}
}

// A JSON body with a member name twice is refused with 400 before the key is claimed:
// parsers disagree on which value counts, so the payment's meaning is ambiguous. The key
// stays free for the corrected request.
func TestDuplicateMemberRefused(t *testing.T) {
	mw, err := idemserver.New(idemserver.Config{
		Backend: idemserver.NewMemory(),
		Tenant:  func(*http.Request) (string, error) { return "acct_1", nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	var executed atomic.Int64
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		executed.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	post := func(body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "k1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	rec := post(`{"amount":1,"currency":"EUR","\u0061mount":2}`)
	var p idemserver.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || rec.Code != http.StatusBadRequest ||
		rec.Header().Get("Content-Type") != "application/problem+json" ||
		p.Type != idemserver.ProblemBodyDuplicateMember || p.Status != http.StatusBadRequest ||
		p.Detail != `JSON object member "amount" appears more than once; send each member once` {
		t.Fatalf("duplicate member: %d %q %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	if rec := post(`{"amount":2,"currency":"EUR"}`); rec.Code != http.StatusCreated || rec.Header().Get(idemserver.ReplayedHeader) != "" {
		t.Fatalf("corrected request with the same key: %d %s", rec.Code, rec.Body)
	}
	if n := executed.Load(); n != 1 {
		t.Errorf("executed %d times, want 1", n)
	}
}
