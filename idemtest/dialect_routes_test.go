package idemtest

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStripeSearchLag: a charge is invisible to the search until SearchLag (2 s by default)
// after its execution, by the injected clock; then visible, in both stripe dialects.
func TestStripeSearchLag(t *testing.T) {
	for _, tt := range []struct {
		name string
		lag  time.Duration // Config.SearchLag
		want time.Duration // the effective lag
	}{
		{DialectStripe, 0, DefaultSearchLag},
		{DialectStripeV2, 0, DefaultSearchLag},
		{DialectStripe, 30 * time.Second, 30 * time.Second},
		{DialectStripe, -1, 0},
	} {
		t.Run(tt.name+"/"+tt.want.String(), func(t *testing.T) {
			s, clk := dialectServer(t, tt.name, Config{SearchLag: tt.lag})
			p := chargeOf(t, pay(t, s, tt.name, "k", 100, "it's-r"))
			search := func() []string {
				r := get(t, s, StripeSearchPath("it's-r"))
				wantStatus(t, r, http.StatusOK)
				assert.Equal(t, "search_result", at(t, r.body, "object"))
				return dataIDs(t, r.body)
			}
			if tt.want > 0 {
				assert.Empty(t, search(), "at once")
				clk.Add(tt.want - time.Millisecond)
				assert.Empty(t, search(), "just before the lag")
				clk.Add(time.Millisecond)
			}
			assert.Equal(t, []string{p.ID}, search(), "after the lag")
			assert.Empty(t, dataIDs(t, get(t, s, StripeSearchPath("other")).body))
			bad := get(t, s, PaymentsPath+"/search?query=status:'succeeded'")
			wantStatus(t, bad, http.StatusBadRequest)
			assert.Equal(t, "invalid_request_error", at(t, bad.body, "error.type"))
			assert.NotEqual(t, http.StatusOK, get(t, s, KeyStatusPath("k")).status, "no status endpoint")
			searches := 2 // after the lag, and "other"; the bad query is a 400
			if tt.want > 0 {
				searches += 2
			}
			assert.Equal(t, searches, s.Stats().Searches)
		})
	}
}

// TestAdyenCancelByReference: POST /v1/cancels cancels every charge with the reference, the
// one still executing included; the ledger counts the charges net of cancels.
func TestAdyenCancelByReference(t *testing.T) {
	s, _ := dialectServer(t, DialectAdyen, Config{SlowDelay: 200 * time.Millisecond})
	wantStatus(t, pay(t, s, DialectAdyen, "k1", 100, "R"), http.StatusCreated)
	wantStatus(t, pay(t, s, DialectAdyen, "k2", 100, "R"), http.StatusCreated)
	wantStatus(t, pay(t, s, DialectAdyen, "k3", 100, "other"), http.StatusCreated)

	// A third charge for R is still executing when the cancel arrives.
	s.Script(FaultSlow)
	held := make(chan reply, 1)
	go func() { held <- pay(t, s, DialectAdyen, "k4", 100, "R") }()
	eventually(t, "the slow request", func() bool { return s.Stats().Faults[FaultSlow] == 1 })

	c := raw(t, s.URL, http.MethodPost, CancelsPath, "", "", `{"paymentReference":"R","merchantAccount":"M"}`)
	wantStatus(t, c, http.StatusCreated)
	assert.Equal(t, "received", at(t, c.body, "status"))
	assert.Equal(t, "R", at(t, c.body, "paymentReference"))
	wantStatus(t, <-held, http.StatusCreated)

	charged, canceled := s.ChargesByReference("R")
	assert.Equal(t, 3, charged)
	assert.Equal(t, 3, canceled)
	charged, canceled = s.ChargesByReference("other")
	assert.Equal(t, [2]int{1, 0}, [2]int{charged, canceled})
	for _, e := range s.Executions() {
		assert.Equal(t, e.Reference == "R", e.Canceled, e.ID)
		assert.Equal(t, map[bool]string{true: "canceled", false: "succeeded"}[e.Reference == "R"], e.Status())
	}

	// Pay again after the cancel: exactly one charge net of cancels.
	wantStatus(t, pay(t, s, DialectAdyen, "k5", 100, "R"), http.StatusCreated)
	charged, canceled = s.ChargesByReference("R")
	assert.Equal(t, 1, charged-canceled)

	bad := raw(t, s.URL, http.MethodPost, CancelsPath, "", "", `{}`)
	wantStatus(t, bad, http.StatusBadRequest)
	assert.Equal(t, "702", at(t, bad.body, "errorCode"))
	assert.Equal(t, 1, s.Stats().Cancels)
	assert.NotEqual(t, http.StatusOK, get(t, s, SearchPath("R")).status, "no search")
	assert.NotEqual(t, http.StatusOK, get(t, s, KeyStatusPath("k1")).status, "no status endpoint")
}

// TestPayPalRetention: a repeat within KeyRetention (6 h by default) returns the resource
// as it is now; at the retention the key is forgotten and the same request is a new payment.
func TestPayPalRetention(t *testing.T) {
	s, clk := dialectServer(t, DialectPayPal, Config{})
	first := chargeOf(t, pay(t, s, DialectPayPal, "k", 100, "r"))
	fetched := get(t, s, PaymentPath(first.ID))
	wantStatus(t, fetched, http.StatusOK)
	assert.Equal(t, first, chargeOf(t, fetched))
	nf := get(t, s, PaymentPath("pay_99"))
	wantStatus(t, nf, http.StatusNotFound)
	assert.Equal(t, "RESOURCE_NOT_FOUND", at(t, nf.body, "name"))

	clk.Add(PayPalKeyRetention - time.Second)
	again := pay(t, s, DialectPayPal, "k", 100, "r")
	wantStatus(t, again, http.StatusOK)
	assert.Equal(t, first, chargeOf(t, again))
	assert.Equal(t, 1, s.ExecutionsByReference("r"))

	clk.Add(time.Second)
	late := pay(t, s, DialectPayPal, "k", 100, "r")
	wantStatus(t, late, http.StatusCreated)
	assert.NotEqual(t, first.ID, chargeOf(t, late).ID)
	assert.Equal(t, 2, s.ExecutionsByReference("r"), "the forgotten key charged again")
	assert.Equal(t, 2, s.ExecutionsFor("k"))
}

// TestKeyRetentionConfig: a configured retention applies to any dialect on the key store; a
// negative one never forgets.
func TestKeyRetentionConfig(t *testing.T) {
	s, clk := dialectServer(t, DialectStripe, Config{KeyRetention: time.Hour})
	wantStatus(t, pay(t, s, DialectStripe, "k", 1, "r"), http.StatusCreated)
	clk.Add(time.Hour)
	wantStatus(t, pay(t, s, DialectStripe, "k", 1, "r"), http.StatusCreated)
	assert.Equal(t, 2, s.ExecutionsFor("k"))

	s, clk = dialectServer(t, DialectPayPal, Config{KeyRetention: -1})
	wantStatus(t, pay(t, s, DialectPayPal, "k", 1, "r"), http.StatusCreated)
	clk.Add(1000 * time.Hour)
	wantStatus(t, pay(t, s, DialectPayPal, "k", 1, "r"), http.StatusOK)
	assert.Equal(t, 1, s.ExecutionsFor("k"))
}

// TestLookupRoutes: checkout lists by reference, increase by idempotency key, gocardless
// fetches by id within the tenant; ietf and square have no lookup.
func TestLookupRoutes(t *testing.T) {
	t.Run(DialectCheckout, func(t *testing.T) {
		s, _ := dialectServer(t, DialectCheckout, Config{})
		s.Script(Fault500AfterCommit)
		wantStatus(t, pay(t, s, DialectCheckout, "k", 1, "r"), http.StatusInternalServerError)
		r := get(t, s, SearchPath("r"))
		wantStatus(t, r, http.StatusOK)
		assert.Equal(t, []string{"pay_1"}, dataIDs(t, r.body), "consistent at once")
		bad := get(t, s, PaymentsPath)
		wantStatus(t, bad, http.StatusUnprocessableEntity)
		assert.Equal(t, "request_invalid", at(t, bad.body, "error_type"))
	})
	t.Run(DialectIncrease, func(t *testing.T) {
		s, _ := dialectServer(t, DialectIncrease, Config{})
		p := chargeOf(t, pay(t, s, DialectIncrease, "k", 1, "r"))
		chargeOf(t, pay(t, s, DialectIncrease, "k2", 1, "r"))
		r := get(t, s, KeyListPath("k"))
		wantStatus(t, r, http.StatusOK)
		assert.Equal(t, []string{p.ID}, dataIDs(t, r.body))
		assert.Empty(t, dataIDs(t, get(t, s, KeyListPath("none")).body))
		wantStatus(t, get(t, s, PaymentsPath), http.StatusBadRequest)
	})
	t.Run(DialectGoCardless, func(t *testing.T) {
		s, _ := dialectServer(t, DialectGoCardless, Config{})
		p := chargeOf(t, pay(t, s, DialectGoCardless, "k", 1, "r"))
		wantStatus(t, get(t, s, PaymentPath(p.ID)), http.StatusOK)
		other := raw(t, s.URL, http.MethodGet, PaymentPath(p.ID), "Authorization", "Bearer other", "")
		wantStatus(t, other, http.StatusNotFound)
		assert.Equal(t, "resource_not_found", at(t, other.body, "error.errors.0.reason"))
		assert.Equal(t, 2, s.Stats().Fetches)
	})
	for _, name := range []string{DialectIETF, DialectSquare} {
		t.Run(name, func(t *testing.T) {
			s, _ := dialectServer(t, name, Config{})
			wantStatus(t, pay(t, s, name, "k", 1, "r"), http.StatusCreated)
			for _, path := range []string{SearchPath("r"), KeyStatusPath("k"), PaymentPath("pay_1"), StripeSearchPath("r")} {
				r := get(t, s, path)
				require.NoError(t, r.err)
				assert.Contains(t, []int{404, 405}, r.status, path)
			}
		})
	}
}
