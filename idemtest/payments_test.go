package idemtest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func TestReplayIsByteIdentical(t *testing.T) {
	s := newTestServer(t, Config{})
	c := call{key: "k1", tenant: "Bearer sk_acme", body: paymentBody(1000, "order-1")}

	first := do(t, s.URL, c)
	wantStatus(t, first, http.StatusCreated)
	if first.replayed() {
		t.Error("first answer carries Idempotent-Replayed")
	}
	if ct := first.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	var p payment
	if err := json.Unmarshal(first.body, &p); err != nil {
		t.Fatal(err)
	}
	want := payment{ID: "pay_1", Amount: 1000, Currency: "EUR", Customer: "cus_1", Reference: "order-1", Status: "succeeded"}
	if p != want {
		t.Errorf("payment = %+v, want %+v", p, want)
	}

	for range 2 {
		again := do(t, s.URL, c)
		wantStatus(t, again, http.StatusCreated)
		if !again.replayed() {
			t.Error("replay lacks Idempotent-Replayed: true")
		}
		if !bytes.Equal(again.body, first.body) {
			t.Errorf("replayed body %s differs from %s", again.body, first.body)
		}
		if ct := again.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("replay Content-Type = %q", ct)
		}
	}
	wantInt(t, "ExecutionsFor", s.ExecutionsFor("k1"), 1)
	wantInt(t, "ExecutionsByReference", s.ExecutionsByReference("order-1"), 1)
	wantInt(t, "AttemptsFor", s.AttemptsFor("k1"), 3)
	wantInt(t, "Attempts", s.Attempts(), 3)
	wantInt(t, "Replays", s.Stats().Replays, 2)

	ex := s.Executions()
	if len(ex) != 1 {
		t.Fatalf("ledger has %d entries", len(ex))
	}
	e := ex[0]
	e.At = e.At.Round(0)
	if e.ID != "pay_1" || e.Tenant != "Bearer sk_acme" || e.Path != PaymentsPath || e.Key != "k1" ||
		e.Reference != "order-1" || e.Amount != 1000 || e.Currency != "EUR" || e.Customer != "cus_1" || e.At.IsZero() {
		t.Errorf("execution = %+v", e)
	}
}

func TestKeyReusedWithAnotherRequest(t *testing.T) {
	tests := []struct {
		name string
		body string
	}{
		{"other amount", paymentBody(1001, "order-1")},
		{"other reference", paymentBody(1000, "order-2")},
		{"same JSON, other bytes", strings.Replace(paymentBody(1000, "order-1"), ":", ": ", 1)},
		{"invalid body", `{"amount":0}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t, Config{})
			wantStatus(t, do(t, s.URL, call{key: "k", body: paymentBody(1000, "order-1")}), http.StatusCreated)

			r := do(t, s.URL, call{key: "k", body: tt.body})
			wantStatus(t, r, http.StatusUnprocessableEntity)
			if got := r.errorCode(t); got != "idempotency_key_reused" {
				t.Errorf("error = %q", got)
			}
			if !strings.Contains(string(r.body), `"message"`) {
				t.Errorf("422 body lacks a message: %s", r.body)
			}
			wantInt(t, "ExecutionsFor", s.ExecutionsFor("k"), 1)
			wantInt(t, "KeyReused", s.Stats().KeyReused, 1)
		})
	}
}

func TestValidationStoresNothing(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		wantParam string
	}{
		{"zero amount", `{"amount":0,"currency":"EUR","customer":"c"}`, "amount"},
		{"negative amount", `{"amount":-5,"currency":"EUR","customer":"c"}`, "amount"},
		{"fractional amount", `{"amount":1.5,"currency":"EUR","customer":"c"}`, "amount"},
		{"string amount", `{"amount":"10","currency":"EUR","customer":"c"}`, "amount"},
		{"lowercase currency", `{"amount":10,"currency":"eur","customer":"c"}`, "currency"},
		{"short currency", `{"amount":10,"currency":"EU","customer":"c"}`, "currency"},
		{"long currency", `{"amount":10,"currency":"EURO","customer":"c"}`, "currency"},
		{"missing currency", `{"amount":10,"customer":"c"}`, "currency"},
		{"empty customer", `{"amount":10,"currency":"EUR","customer":""}`, "customer"},
		{"bad JSON", `{"amount":10,`, ""},
		{"trailing data", `{"amount":10,"currency":"EUR","customer":"c"} {}`, ""},
		{"not an object", `[1,2]`, ""},
		{"empty body", ``, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t, Config{})
			r := do(t, s.URL, call{key: "k", body: tt.body})
			wantStatus(t, r, http.StatusBadRequest)
			var e errorBody
			if err := json.Unmarshal(r.body, &e); err != nil {
				t.Fatal(err)
			}
			if e.Error != "invalid_request" || e.Param != tt.wantParam || e.Message == "" {
				t.Errorf("error body = %+v, want invalid_request with param %q", e, tt.wantParam)
			}
			if st := status(t, s.URL, "", "k"); st.status != http.StatusNotFound {
				t.Errorf("status after 400 = %d, want 404", st.status)
			}

			// The key is free again: a valid request executes normally, once.
			ok := do(t, s.URL, call{key: "k", body: paymentBody(10, "r")})
			wantStatus(t, ok, http.StatusCreated)
			if ok.replayed() {
				t.Error("valid request after a 400 was a replay")
			}
			wantInt(t, "ExecutionsFor", s.ExecutionsFor("k"), 1)
			wantInt(t, "BadRequests", s.Stats().BadRequests, 1)
		})
	}
}

func TestIdempotencyKeyHeader(t *testing.T) {
	long := strings.Repeat("a", MaxKeyLength)
	tests := []struct {
		name    string
		values  []string
		wantKey string // stored key when accepted
		wantErr string // error code when refused
	}{
		{name: "bare", values: []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, wantKey: "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{name: "sf-string", values: []string{`"8e03978e-40d5"`}, wantKey: "8e03978e-40d5"},
		{name: "sf-string with escapes", values: []string{`"a\"b\\c"`}, wantKey: `a"b\c`},
		{name: "surrounding spaces", values: []string{`  "abc"  `}, wantKey: "abc"},
		{name: "longest", values: []string{long}, wantKey: long},
		{name: "missing", values: nil, wantErr: "missing_idempotency_key"},
		{name: "empty", values: []string{""}, wantErr: "missing_idempotency_key"},
		{name: "empty sf-string", values: []string{`""`}, wantErr: "missing_idempotency_key"},
		{name: "unterminated sf-string", values: []string{`"abc`}, wantErr: "invalid_idempotency_key"},
		{name: "data after sf-string", values: []string{`"abc"d`}, wantErr: "invalid_idempotency_key"},
		{name: "bad escape", values: []string{`"a\nb"`}, wantErr: "invalid_idempotency_key"},
		{name: "too long", values: []string{long + "a"}, wantErr: "invalid_idempotency_key"},
		{name: "repeated header", values: []string{"a", "b"}, wantErr: "invalid_idempotency_key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t, Config{})
			req, err := http.NewRequest(http.MethodPost, s.URL+PaymentsPath, strings.NewReader(paymentBody(10, "r")))
			if err != nil {
				t.Fatal(err)
			}
			req.Header[DefaultKeyHeader] = tt.values
			resp, err := newClient().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if tt.wantErr != "" {
				if resp.StatusCode != http.StatusBadRequest {
					t.Fatalf("status = %d, want 400", resp.StatusCode)
				}
				if n := len(s.Executions()); n != 0 {
					t.Errorf("%d executions after a refused key", n)
				}
				return
			}
			if resp.StatusCode != http.StatusCreated {
				t.Fatalf("status = %d, want 201", resp.StatusCode)
			}
			wantInt(t, "ExecutionsFor", s.ExecutionsFor(tt.wantKey), 1)
			wantInt(t, "AttemptsFor", s.AttemptsFor(tt.wantKey), 1)
		})
	}

	t.Run("error bodies", func(t *testing.T) {
		s := newTestServer(t, Config{})
		if got := do(t, s.URL, call{body: paymentBody(10, "r")}).errorCode(t); got != "missing_idempotency_key" {
			t.Errorf("error = %q", got)
		}
		wantInt(t, "BadRequests", s.Stats().BadRequests, 1)
	})

	t.Run("bare and sf-string name the same record", func(t *testing.T) {
		s := newTestServer(t, Config{})
		wantStatus(t, do(t, s.URL, call{key: "abc", body: paymentBody(10, "r")}), http.StatusCreated)
		r := do(t, s.URL, call{key: `"abc"`, body: paymentBody(10, "r")})
		wantStatus(t, r, http.StatusCreated)
		if !r.replayed() {
			t.Error("sf-string key did not replay the bare key's result")
		}
		wantStatus(t, status(t, s.URL, "", `"abc"`), http.StatusOK)
	})

	t.Run("custom header name", func(t *testing.T) {
		s := newTestServer(t, Config{KeyHeader: "X-Request-Key"})
		wantStatus(t, do(t, s.URL, call{key: "abc", body: paymentBody(10, "r")}), http.StatusBadRequest)
		req, _ := http.NewRequest(http.MethodPost, s.URL+PaymentsPath, strings.NewReader(paymentBody(10, "r")))
		req.Header.Set("X-Request-Key", "abc")
		resp, err := newClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		wantInt(t, "status", resp.StatusCode, http.StatusCreated)
		wantInt(t, "ExecutionsFor", s.ExecutionsFor("abc"), 1)
	})
}

func TestKeyScopedByTenantAndPath(t *testing.T) {
	const payouts = "/v1/payouts"
	s := newTestServer(t, Config{Paths: []string{PaymentsPath, payouts}})
	body := paymentBody(10, "r")
	calls := []call{
		{key: "k", tenant: "Bearer sk_acme", body: body},
		{key: "k", tenant: "Bearer sk_globex", body: body},
		{key: "k", body: body},
		{key: "k", tenant: "Bearer sk_acme", path: payouts, body: body},
	}
	for _, c := range calls {
		r := do(t, s.URL, c)
		wantStatus(t, r, http.StatusCreated)
		if r.replayed() {
			t.Errorf("%+v was a replay of another scope", c)
		}
	}
	for _, c := range calls {
		if r := do(t, s.URL, c); r.status != http.StatusCreated || !r.replayed() {
			t.Errorf("%+v: resend got %d replayed=%v, want a replay", c, r.status, r.replayed())
		}
	}
	wantInt(t, "ExecutionsFor", s.ExecutionsFor("k"), 4)
	wantInt(t, "AttemptsFor", s.AttemptsFor("k"), 8)
	if ex := s.Executions(); ex[1].Tenant != "Bearer sk_globex" || ex[3].Path != payouts {
		t.Errorf("ledger = %+v", ex)
	}

	// Status is scoped the same way.
	only := call{key: "acme-only", tenant: "Bearer sk_acme", body: body}
	wantStatus(t, do(t, s.URL, only), http.StatusCreated)
	wantStatus(t, status(t, s.URL, "Bearer sk_acme", "acme-only"), http.StatusOK)
	wantStatus(t, status(t, s.URL, "Bearer sk_globex", "acme-only"), http.StatusNotFound)
	wantStatus(t, status(t, s.URL, "", "acme-only"), http.StatusNotFound)
	wantStatus(t, do(t, s.URL, call{method: http.MethodGet, path: payouts + "/operations/acme-only", tenant: "Bearer sk_acme"}), http.StatusNotFound)
}

func TestConcurrentSameKeyExecutesOnce(t *testing.T) {
	s := newTestServer(t, Config{})
	const n = 20
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		replies = make([]reply, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			replies[i] = do(t, s.URL, call{key: "same", tenant: "Bearer sk_acme", body: paymentBody(500, "order-c")})
		})
	}
	close(start)
	wg.Wait()

	var created [][]byte
	for i, r := range replies {
		if r.err != nil {
			t.Fatalf("goroutine %d: %v", i, r.err)
		}
		switch r.status {
		case http.StatusCreated:
			created = append(created, r.body)
		case http.StatusConflict:
			if r.header.Get("Retry-After") == "" {
				t.Errorf("409 without Retry-After")
			}
		default:
			t.Errorf("goroutine %d: status %d (%s)", i, r.status, r.body)
		}
	}
	if len(created) == 0 {
		t.Fatal("no 201")
	}
	for _, b := range created[1:] {
		if !bytes.Equal(b, created[0]) {
			t.Errorf("201 bodies differ: %s vs %s", b, created[0])
		}
	}
	wantInt(t, "ExecutionsFor", s.ExecutionsFor("same"), 1)
	wantInt(t, "AttemptsFor", s.AttemptsFor("same"), n)
	st := s.Stats()
	wantInt(t, "Replays+InProgress", st.Replays+st.InProgress, n-1)
}

func TestOnPaymentRunsFirst(t *testing.T) {
	var (
		s    *Server
		mu   sync.Mutex
		seen []int
	)
	s = newTestServer(t, Config{OnPayment: func(r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Header.Get(DefaultKeyHeader) != "k" {
			t.Errorf("OnPayment saw key %q", r.Header.Get(DefaultKeyHeader))
		}
		seen = append(seen, s.Attempts())
	}})
	s.Script(Fault503)
	do(t, s.URL, call{key: "k", body: paymentBody(10, "r")})
	do(t, s.URL, call{key: "k", body: paymentBody(10, "r")})
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != 0 || seen[1] != 1 {
		t.Errorf("Attempts seen by OnPayment = %v, want [0 1]", seen)
	}
}

func TestRoutes(t *testing.T) {
	s := newTestServer(t, Config{})
	wantStatus(t, do(t, s.URL, call{method: http.MethodPut, path: PaymentsPath}), http.StatusMethodNotAllowed)
	wantStatus(t, do(t, s.URL, call{path: "/v1/other", key: "k", body: paymentBody(1, "r")}), http.StatusNotFound)
	wantInt(t, "Attempts", s.Attempts(), 0)
}

func TestHandlerInOwnServer(t *testing.T) {
	h := NewHandler(Config{})
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); srv.Close() })
	wantStatus(t, do(t, srv.URL, call{key: "k", body: paymentBody(10, "r")}), http.StatusCreated)
	wantInt(t, "ExecutionsFor", h.ExecutionsFor("k"), 1)
}
