package idemtest

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
)

func TestStatusEndpoint(t *testing.T) {
	s := newTestServer(t, Config{SlowDelay: -1, RetryAfter: 3})
	const tenant = "Bearer sk_acme"

	t.Run("not found", func(t *testing.T) {
		r := status(t, s.URL, tenant, "unknown")
		wantStatus(t, r, http.StatusNotFound)
		if string(r.body) != `{"status":"not_found"}` {
			t.Errorf("body = %s", r.body)
		}
	})

	t.Run("completed", func(t *testing.T) {
		created := do(t, s.URL, call{key: "done", tenant: tenant, body: paymentBody(700, "order-s")})
		wantStatus(t, created, http.StatusCreated)
		r := status(t, s.URL, tenant, "done")
		wantStatus(t, r, http.StatusOK)
		var got struct {
			Status         string          `json:"status"`
			ResponseStatus int             `json:"response_status"`
			ResponseBody   json.RawMessage `json:"response_body"`
		}
		if err := json.Unmarshal(r.body, &got); err != nil {
			t.Fatal(err)
		}
		if got.Status != "completed" || got.ResponseStatus != http.StatusCreated || string(got.ResponseBody) != string(created.body) {
			t.Errorf("status body = %s, want completed/201 with %s", r.body, created.body)
		}
	})

	t.Run("processing", func(t *testing.T) {
		// A claim in progress, without timing: hold the record directly.
		ctx := context.Background()
		claim, rec, err := s.backend.Claim(ctx, idemserver.ClaimRequest{
			Scope:       idemserver.Scope{Tenant: tenant, Operation: operation(PaymentsPath), Key: "busy"},
			Fingerprint: rawFingerprint(http.MethodPost, operation(PaymentsPath), nil), Now: time.Now(), Lease: time.Minute,
		})
		if err != nil || claim == nil {
			t.Fatalf("claim = %v, %+v, %v", claim, rec, err)
		}
		defer func() { _ = claim.Release(ctx) }()
		r := status(t, s.URL, tenant, "busy")
		wantStatus(t, r, http.StatusAccepted)
		if string(r.body) != `{"status":"processing"}` || r.header.Get("Retry-After") != "3" {
			t.Errorf("body = %s, Retry-After = %q", r.body, r.header.Get("Retry-After"))
		}
	})

	wantInt(t, "KeyStatusChecks", s.KeyStatusChecks(), 3)
	wantInt(t, "Attempts", s.Attempts(), 1)
}

func TestStatusFaults(t *testing.T) {
	s := newTestServer(t, Config{KeyStatusFaultRate: 1})
	wantStatus(t, do(t, s.URL, call{key: "k", body: paymentBody(1, "r")}), http.StatusCreated)
	for range 3 {
		r := status(t, s.URL, "", "k")
		wantStatus(t, r, http.StatusServiceUnavailable)
		if ra := r.header.Get("Retry-After"); ra != "0" {
			t.Errorf("Retry-After = %q, want 0", ra)
		}
	}
	st := s.Stats()
	wantInt(t, "KeyStatusChecks", st.KeyStatusChecks, 3)
	wantInt(t, "KeyStatusFaults", st.KeyStatusFaults, 3)
	wantInt(t, "POST faults", len(st.Faults), 0)
}

func TestStatusPaths(t *testing.T) {
	if got := KeyStatusPath("a b/c"); got != "/v1/payments/operations/a%20b%2Fc" {
		t.Errorf("KeyStatusPath = %q", got)
	}
	if KeyStatusPathPattern != PaymentsPath+statusSuffix+"{key}" {
		t.Errorf("KeyStatusPathPattern %q does not match the routes", KeyStatusPathPattern)
	}
}
