package idemtest

import (
	"encoding/json"
	"net/http"
	"testing"
)

// search GETs the search by reference and decodes its list.
func search(t *testing.T, base, tenant, ref string) []payment {
	t.Helper()
	r := do(t, base, call{method: http.MethodGet, path: SearchPath(ref), tenant: tenant})
	wantStatus(t, r, http.StatusOK)
	var v struct {
		Data []payment `json:"data"`
	}
	if err := json.Unmarshal(r.body, &v); err != nil || v.Data == nil {
		t.Fatalf("search body %s: %v (want a data list)", r.body, err)
	}
	return v.Data
}

// The search lists the tenant's charges with the reference, oldest first, whatever their
// keys, including a charge whose key stored a 500; another tenant sees none of them.
func TestSearchByReference(t *testing.T) {
	s := newTestServer(t, Config{})
	const acme, other = "Bearer sk_acme", "Bearer sk_other"
	s.Script(FaultStored500AfterCharge, FaultStored500, FaultNone, FaultNone)
	r := do(t, s.URL, call{key: "k1", tenant: acme, body: paymentBody(100, "order-1")})
	wantStatus(t, r, http.StatusInternalServerError)
	if r.replayed() {
		t.Fatal("the first answer is not a replay")
	}
	wantStatus(t, do(t, s.URL, call{key: "k2", tenant: acme, body: paymentBody(100, "order-2")}), http.StatusInternalServerError)
	wantStatus(t, do(t, s.URL, call{key: "k3", tenant: acme, body: paymentBody(100, "order-1")}), http.StatusCreated)
	wantStatus(t, do(t, s.URL, call{key: "k4", tenant: other, body: paymentBody(100, "order-1")}), http.StatusCreated)

	// Both stored 500s replay identically: a client cannot tell which one charged.
	r1 := do(t, s.URL, call{key: "k1", tenant: acme, body: paymentBody(100, "order-1")})
	r2 := do(t, s.URL, call{key: "k2", tenant: acme, body: paymentBody(100, "order-2")})
	wantStatus(t, r1, http.StatusInternalServerError)
	wantStatus(t, r2, http.StatusInternalServerError)
	if !r1.replayed() || !r2.replayed() || string(r1.body) != string(r2.body) {
		t.Errorf("stored 500s differ: %s %v / %s %v", r1.body, r1.header, r2.body, r2.header)
	}

	got := search(t, s.URL, acme, "order-1")
	if len(got) != 2 || got[0].ID != "pay_1" || got[1].ID != "pay_2" || got[0].Reference != "order-1" {
		t.Errorf("search order-1 = %+v, want pay_1 then pay_2", got)
	}
	if got := search(t, s.URL, acme, "order-2"); len(got) != 0 {
		t.Errorf("search order-2 = %+v, want none (stored 500 without charge)", got)
	}
	if got := search(t, s.URL, other, "order-1"); len(got) != 1 || got[0].ID != "pay_3" {
		t.Errorf("other tenant's search = %+v, want only pay_3", got)
	}
	wantInt(t, "by reference order-1", s.ExecutionsByReference("order-1"), 3)
	wantInt(t, "by reference order-2", s.ExecutionsByReference("order-2"), 0)
	wantInt(t, "key k1", s.ExecutionsFor("k1"), 1)
	wantInt(t, "key k2", s.ExecutionsFor("k2"), 0)
	wantInt(t, "stored-500-after-charge faults", s.Stats().Faults[FaultStored500AfterCharge], 1)
	wantInt(t, "Searches", s.Stats().Searches, 3)

	// Status endpoint: both stored 500s are completed with response_status 500.
	for _, k := range []string{"k1", "k2"} {
		st := status(t, s.URL, acme, k)
		wantStatus(t, st, http.StatusOK)
		var v struct {
			Status         string `json:"status"`
			ResponseStatus int    `json:"response_status"`
		}
		if err := json.Unmarshal(st.body, &v); err != nil || v.Status != "completed" || v.ResponseStatus != 500 {
			t.Errorf("status %s = %s", k, st.body)
		}
	}
}

func TestSearchNeedsOneReference(t *testing.T) {
	s := newTestServer(t, Config{})
	for _, path := range []string{PaymentsPath, PaymentsPath + "?reference=", PaymentsPath + "?reference=a&reference=b"} {
		r := do(t, s.URL, call{method: http.MethodGet, path: path})
		wantStatus(t, r, http.StatusBadRequest)
		if r.errorCode(t) != "invalid_request" {
			t.Errorf("%s: error %q", path, r.errorCode(t))
		}
	}
}
