package idemserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
)

// scribbler is an outer handler's ResponseWriter that changes every header value it is sent
// in place, as the middleware's answer goes out.
type scribbler struct{ http.ResponseWriter }

func (s scribbler) WriteHeader(code int) {
	for _, vs := range s.Header() {
		for i := range vs {
			vs[i] = "changed"
		}
	}
	s.ResponseWriter.WriteHeader(code)
}

// TestStoredHeaders: the client gets every header the handler set, the key keeps only
// Config.StoredHeaders' (multiple values and their order included), and what an outer
// handler does to the header values it is sent reaches neither the stored answer nor its
// replay.
func TestStoredHeaders(t *testing.T) {
	mem := idemserver.NewMemory()
	mw, err := idemserver.New(idemserver.Config{Backend: mem, Tenant: func(*http.Request) (string, error) { return "acct_1", nil }})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header()["Content-Language"] = []string{"de", "en"}
		w.Header().Set("Location", "/v1/payments/pay_1")
		w.Header().Set("X-Request-Id", "req_1")
		w.Header().Set("Set-Cookie", "session=s1")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"pay_1"}`))
	}))
	serve := func(w http.ResponseWriter, key string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":1}`))
		r.Header.Set("Idempotency-Key", key)
		h.ServeHTTP(w, r)
	}

	first := httptest.NewRecorder()
	serve(first, "k-headers")
	want := http.Header{
		"Content-Type":     {"application/json"},
		"Content-Language": {"de", "en"},
		"Location":         {"/v1/payments/pay_1"},
		"X-Request-Id":     {"req_1"},
		"Set-Cookie":       {"session=s1"},
		"Content-Length":   {"14"},
	}
	if first.Code != http.StatusCreated || !reflect.DeepEqual(first.Header(), want) || first.Body.String() != `{"id":"pay_1"}` {
		t.Fatalf("first answer: %d %v %q", first.Code, first.Header(), first.Body)
	}

	// Again through the outer handler: a replay, whose values it changes as they go out.
	serve(scribbler{httptest.NewRecorder()}, "k-headers")
	rec, err := mem.Lookup(context.Background(), idemserver.Scope{Tenant: "acct_1", Operation: "POST /v1/payments", Key: "k-headers"}, time.Now())
	if err != nil || rec == nil || rec.Response == nil {
		t.Fatalf("lookup: %v %v", rec, err)
	}
	stored := http.Header{"Content-Type": {"application/json"}, "Content-Language": {"de", "en"}, "Location": {"/v1/payments/pay_1"}}
	if !reflect.DeepEqual(rec.Response.Header, stored) {
		t.Fatalf("stored header %v, want %v", rec.Response.Header, stored)
	}

	// And the outer handler on a first answer: its changes stay out of the replay.
	serve(scribbler{httptest.NewRecorder()}, "k-outer")
	replay := httptest.NewRecorder()
	serve(replay, "k-outer")
	wantReplay := http.Header{"Content-Type": {"application/json"}, "Content-Language": {"de", "en"}, "Location": {"/v1/payments/pay_1"},
		"Content-Length": {"14"}, idemserver.ReplayedHeader: {"true"}}
	if replay.Code != http.StatusCreated || !reflect.DeepEqual(replay.Header(), wantReplay) || replay.Body.String() != `{"id":"pay_1"}` {
		t.Fatalf("replay: %d %v %q", replay.Code, replay.Header(), replay.Body)
	}
}
