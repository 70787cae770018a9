package idemtest

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
)

// The POST endpoint is idemserver's middleware: its counters move with idemtest's, its
// answers are in this API's error format, and faults consumed without effect never reach
// its store.
func TestServedThroughIdemserver(t *testing.T) {
	s := newTestServer(t, Config{SlowDelay: -1})
	c := call{key: "k", tenant: "Bearer sk_acme", body: paymentBody(10, "order-m")}
	s.Script(Fault503, FaultNone, FaultDropAfterCommit) // 503 on the wire, 201, a replay that drops nothing
	wantStatus(t, do(t, s.URL, c), http.StatusServiceUnavailable)
	wantStatus(t, do(t, s.URL, c), http.StatusCreated)
	r := do(t, s.URL, c)
	wantStatus(t, r, http.StatusCreated)
	if !r.replayed() {
		t.Error("a replay with an unused after-commit fault is not marked replayed")
	}
	reused := do(t, s.URL, call{key: "k", tenant: "Bearer sk_acme", body: paymentBody(11, "order-m")})
	wantStatus(t, reused, http.StatusUnprocessableEntity)
	if ct := reused.header.Get("Content-Type"); ct != "application/json" || reused.errorCode(t) != "idempotency_key_reused" {
		t.Errorf("422 Content-Type %q body %s", ct, reused.body)
	}
	invalid := do(t, s.URL, call{key: "k2", body: `{"amount":0}`})
	wantStatus(t, invalid, http.StatusBadRequest)

	ms := s.Middleware().Stats()
	want := idemserver.Stats{Executed: 1, NotExecuted: 1, Replays: 1, PayloadConflicts: 1}
	if ms != want {
		t.Errorf("middleware stats = %+v, want %+v", ms, want)
	}
	st := s.Stats()
	wantInt(t, "Replays", st.Replays, int(ms.Replays))
	wantInt(t, "KeyReused", st.KeyReused, int(ms.PayloadConflicts))
	wantInt(t, "BadRequests", st.BadRequests, 1)
	if len(st.Faults) != 1 || st.Faults[Fault503] != 1 {
		t.Errorf("faults = %v, want the 503 only", st.Faults)
	}

	// The stored record is the middleware's, in the scope (Authorization, "POST "+path).
	rec, err := s.backend.Lookup(t.Context(), idemserver.Scope{Tenant: "Bearer sk_acme", Operation: operation(PaymentsPath), Key: "k"}, time.Now())
	if err != nil || rec == nil || rec.State != idemserver.StateCompleted || rec.Response.StatusCode != http.StatusCreated {
		t.Fatalf("record = %+v, %v", rec, err)
	}
	if n := s.backend.Len(); n != 1 {
		t.Errorf("backend holds %d records, want 1 (the 400 stored nothing)", n)
	}
}

// The fingerprint is over the body bytes as sent: the same JSON re-encoded is key reuse,
// where idemserver's default canonical fingerprint would replay it.
func TestRawFingerprint(t *testing.T) {
	a := rawFingerprint(http.MethodPost, "POST /v1/payments", []byte(`{"a":1}`))
	for _, other := range [][]byte{[]byte(`{"a": 1}`), []byte(`{"a":1} `), nil} {
		if string(rawFingerprint(http.MethodPost, "POST /v1/payments", other)) == string(a) {
			t.Errorf("%q shares the fingerprint of {\"a\":1}", other)
		}
	}
	if string(rawFingerprint(http.MethodPost, "POST /v1/payments", []byte(`{"a":1}`))) != string(a) {
		t.Error("fingerprint is not deterministic")
	}
	// Length prefixes: moving bytes between method and operation changes it.
	if string(rawFingerprint("POSTx", "y", nil)) == string(rawFingerprint("POST", "xy", nil)) {
		t.Error("fields are not delimited")
	}
}
