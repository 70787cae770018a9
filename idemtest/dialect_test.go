package idemtest

import (
	"bytes"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checks are JSON paths of an answer and the values they must hold; "$id" stands for the
// id of the key's first charge. Numbers decode as float64.
type checks map[string]any

func assertJSON(t *testing.T, r reply, want checks, firstID string) {
	t.Helper()
	for path, v := range want {
		if v == "$id" {
			v = firstID
		}
		assert.Equal(t, v, at(t, r.body, path), "%s in %s", path, r.body)
	}
}

// TestDialectKeyHandling drives each dialect with raw requests: the carrier (a POST without
// the key), a first payment, a repeat after success, the same key with another body, and
// the same key while the first request still runs.
func TestDialectKeyHandling(t *testing.T) {
	tests := []struct {
		name            string
		missing         int    // a POST without the key
		missingCheck    checks // its body
		repeat          int    // the same request again after a 201
		replayedHeader  bool   // the repeat carries Idempotent-Replayed: true
		sameBytes       bool   // the repeat's body is the first answer's, byte for byte
		repeatCheck     checks
		other           int // the same key with another body
		otherCheck      checks
		inProgress      int // the same key while the first runs
		inProgressCheck checks
	}{
		{name: DialectIdem, missing: 400, missingCheck: checks{"error": "missing_idempotency_key"},
			repeat: 201, replayedHeader: true, sameBytes: true,
			other: 422, otherCheck: checks{"error": "idempotency_key_reused"},
			inProgress: 409, inProgressCheck: checks{"error": "request_in_progress"}},
		{name: DialectIETF, missing: 400, missingCheck: checks{"status": 400.0},
			repeat: 201, replayedHeader: true, sameBytes: true,
			other: 422, otherCheck: checks{"status": 422.0},
			inProgress: 409, inProgressCheck: checks{"status": 409.0}},
		{name: DialectStripe, missing: 400, missingCheck: checks{"error.type": "invalid_request_error"},
			repeat: 201, replayedHeader: true, sameBytes: true,
			other: 400, otherCheck: checks{"error.type": "idempotency_error"},
			inProgress: 409, inProgressCheck: checks{"error.type": "idempotency_error", "error.code": "idempotency_key_in_use"}},
		{name: DialectStripeV2, missing: 400, missingCheck: checks{"error.type": "invalid_request_error"},
			repeat: 201, replayedHeader: true, sameBytes: true,
			other: 400, otherCheck: checks{"error.type": "idempotency_error"},
			inProgress: 409, inProgressCheck: checks{"error.type": "idempotency_error"}},
		{name: DialectAdyen, missing: 400, missingCheck: checks{"errorCode": "702"},
			repeat: 201, sameBytes: true,
			other: 422, otherCheck: checks{"errorCode": "704"},
			inProgress: 409, inProgressCheck: checks{"errorCode": "704", "message": "request already processed or in progress"}},
		{name: DialectPayPal, missing: 400, missingCheck: checks{"details.0.issue": "MISSING_REQUIRED_PARAMETER"},
			repeat: 200, repeatCheck: checks{"id": "$id", "status": "succeeded", "amount": 100.0},
			other: 422, otherCheck: checks{"name": "UNPROCESSABLE_ENTITY", "details.0.issue": "PAYPAL_REQUEST_ID_PREVIOUSLY_USED"},
			inProgress: 409, inProgressCheck: checks{"details.0.issue": "PREVIOUS_REQUEST_IN_PROGRESS"}},
		{name: DialectCheckout, missing: 422, missingCheck: checks{"error_codes.0": "idempotency_key_required"},
			repeat: 201, sameBytes: true,
			other: 422, otherCheck: checks{"error_codes.0": "idempotency_key_reused"},
			inProgress: 409, inProgressCheck: checks{"error_type": "request_in_progress"}},
		{name: DialectGoCardless, missing: 400, missingCheck: checks{"error.type": "invalid_api_usage"},
			repeat: 409, repeatCheck: checks{"error.type": "invalid_state", "error.code": 409.0,
				"error.errors.0.reason": "idempotent_creation_conflict", "error.errors.0.links.conflicting_resource_id": "$id"},
			other: 409, otherCheck: checks{"error.errors.0.links.conflicting_resource_id": "$id"},
			inProgress: 409, inProgressCheck: checks{"error.errors.0.reason": "idempotent_creation_in_progress",
				"error.errors.0.links": nil}},
		{name: DialectSquare, missing: 400, missingCheck: checks{"errors.0.code": "MISSING_REQUIRED_PARAMETER", "errors.0.field": "idempotency_key"},
			repeat: 201, sameBytes: true,
			other: 400, otherCheck: checks{"errors.0.code": "IDEMPOTENCY_KEY_REUSED"},
			inProgress: 409, inProgressCheck: checks{"errors.0.code": "CONFLICT"}},
		{name: DialectIncrease, missing: 400, missingCheck: checks{"type": "invalid_parameters_error"},
			repeat: 201, replayedHeader: true, sameBytes: true,
			other: 409, otherCheck: checks{"type": "idempotency_key_already_used_error", "resource_id": "$id"},
			inProgress: 409, inProgressCheck: checks{"type": "idempotency_key_in_progress_error"}},
	}
	require.Len(t, tests, len(Dialects()))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := dialectServer(t, tt.name, Config{SlowDelay: time.Minute})

			// The carrier: without the key nothing executes.
			body := paymentBody(100, "r1") // square: no idempotency_key field
			missing := raw(t, s.URL, http.MethodPost, PaymentsPath, "", "", body)
			wantStatus(t, missing, tt.missing)
			assertJSON(t, missing, tt.missingCheck, "")
			if tt.name != DialectIdem && tt.name != DialectIETF && tt.name != DialectStripe &&
				tt.name != DialectStripeV2 && tt.name != DialectAdyen && tt.name != DialectGoCardless &&
				tt.name != DialectIncrease { // a header other than Idempotency-Key, or a body field
				wrong := raw(t, s.URL, http.MethodPost, PaymentsPath, DefaultKeyHeader, "k1", body)
				wantStatus(t, wrong, tt.missing)
			}
			assert.Equal(t, 0, s.ExecutionsByReference("r1"))

			// First payment, then the same request again.
			first := pay(t, s, tt.name, "k1", 100, "r1")
			wantStatus(t, first, http.StatusCreated)
			p := chargeOf(t, first)
			assert.Equal(t, payment{ID: p.ID, Amount: 100, Currency: "EUR", Customer: "cus_1", Reference: "r1", Status: "succeeded"}, p)
			again := pay(t, s, tt.name, "k1", 100, "r1")
			wantStatus(t, again, tt.repeat)
			assert.Equal(t, tt.replayedHeader, again.replayed(), "Idempotent-Replayed")
			if tt.sameBytes {
				assert.Equal(t, string(first.body), string(again.body))
			}
			assertJSON(t, again, tt.repeatCheck, p.ID)
			assert.Equal(t, 1, s.ExecutionsByReference("r1"))

			// The same key with another body.
			other := pay(t, s, tt.name, "k1", 200, "r1")
			wantStatus(t, other, tt.other)
			if tt.name == DialectIETF {
				assert.Equal(t, "application/problem+json", other.header.Get("Content-Type"))
			}
			assertJSON(t, other, tt.otherCheck, p.ID)
			assert.Equal(t, 1, s.ExecutionsByReference("r1"))

			// The same key while the first request still runs (FaultSlow holds it).
			s.Script(FaultSlow)
			held := make(chan reply, 1)
			go func() { held <- pay(t, s, tt.name, "k2", 100, "r2") }()
			eventually(t, "the slow request", func() bool { return s.Stats().Faults[FaultSlow] == 1 })
			busy := pay(t, s, tt.name, "k2", 100, "r2")
			wantStatus(t, busy, tt.inProgress)
			assertJSON(t, busy, tt.inProgressCheck, "")
			assert.Equal(t, "0", busy.header.Get("Retry-After"))
			s.Handler.Close() // the held request executes nothing and answers 503
			wantStatus(t, <-held, http.StatusServiceUnavailable)
			assert.Equal(t, 0, s.ExecutionsByReference("r2"))
			wantStatus(t, pay(t, s, tt.name, "k2", 100, "r2"), http.StatusCreated) // the key was released
			assert.Equal(t, 1, s.ExecutionsByReference("r2"))
		})
	}
}

// TestDialectFaults maps each fault onto each dialect: the first answer, what a retry with
// the same key and body answers, and how many charges the ledger then shows.
func TestDialectFaults(t *testing.T) {
	type outcome struct {
		retry   int  // the retry's status
		charges int  // ledger entries for the reference after the retry
		replay  bool // the retry's body is the first answer's (a stored 500)
	}
	type row struct {
		name string
		out  map[Fault]outcome
	}
	replayStored := map[Fault]outcome{ // stripe, increase, idem, ietf
		FaultStored500:            {retry: 500, charges: 0, replay: true},
		FaultStored500AfterCharge: {retry: 500, charges: 1, replay: true},
		Fault500AfterCommit:       {retry: 201, charges: 1},
		FaultDropAfterCommit:      {retry: 201, charges: 1},
	}
	rows := []row{
		{DialectIdem, replayStored},
		{DialectIETF, replayStored},
		{DialectStripe, replayStored},
		{DialectIncrease, replayStored},
		{DialectStripeV2, map[Fault]outcome{
			FaultStored500:            {retry: 201, charges: 1}, // completed on retry
			FaultStored500AfterCharge: {retry: 201, charges: 1},
			Fault500AfterCommit:       {retry: 201, charges: 1},
			FaultDropAfterCommit:      {retry: 201, charges: 1},
		}},
		{DialectAdyen, map[Fault]outcome{
			FaultStored500:            {retry: 201, charges: 1}, // transient-error: true, key released
			FaultStored500AfterCharge: {retry: 500, charges: 1, replay: true},
			Fault500AfterCommit:       {retry: 201, charges: 1},
			FaultDropAfterCommit:      {retry: 201, charges: 1},
		}},
		{DialectPayPal, map[Fault]outcome{
			FaultStored500:            {retry: 201, charges: 1}, // nothing created: a new request
			FaultStored500AfterCharge: {retry: 200, charges: 1}, // the resource now
			Fault500AfterCommit:       {retry: 200, charges: 1},
			FaultDropAfterCommit:      {retry: 200, charges: 1},
		}},
		{DialectCheckout, map[Fault]outcome{
			FaultStored500:            {retry: 201, charges: 1},
			FaultStored500AfterCharge: {retry: 201, charges: 2}, // only 2xx cached: charged again
			Fault500AfterCommit:       {retry: 201, charges: 2},
			FaultDropAfterCommit:      {retry: 201, charges: 1}, // the 201 was cached
		}},
		{DialectGoCardless, map[Fault]outcome{
			FaultStored500:            {retry: 201, charges: 1},
			FaultStored500AfterCharge: {retry: 409, charges: 1}, // the pointer
			Fault500AfterCommit:       {retry: 409, charges: 1},
			FaultDropAfterCommit:      {retry: 409, charges: 1},
		}},
		{DialectSquare, map[Fault]outcome{
			FaultStored500:            {retry: 201, charges: 1},
			FaultStored500AfterCharge: {retry: 201, charges: 1}, // the first successful answer
			Fault500AfterCommit:       {retry: 201, charges: 1},
			FaultDropAfterCommit:      {retry: 201, charges: 1},
		}},
	}
	require.Len(t, rows, len(Dialects()))
	before := []Fault{Fault503, Fault503Date, Fault429, Fault502BeforeProcessing, FaultResetBeforeProcessing}
	for _, rw := range rows {
		for _, f := range append(slices.Clone(before), FaultStored500, FaultStored500AfterCharge, Fault500AfterCommit, FaultDropAfterCommit) {
			t.Run(rw.name+"/"+f.String(), func(t *testing.T) {
				s, _ := dialectServer(t, rw.name, Config{})
				s.Script(f)
				first := pay(t, s, rw.name, "k", 100, "r")
				switch {
				case f == FaultResetBeforeProcessing || f == FaultDropAfterCommit:
					require.Error(t, first.err)
				case f.BeforeProcessing():
					require.NoError(t, first.err)
					assert.Contains(t, []int{429, 502, 503}, first.status)
					assert.Equal(t, rw.name == DialectAdyen && f != FaultResetBeforeProcessing,
						first.header.Get(TransientErrorHeader) == "true", "transient-error")
				default:
					wantStatus(t, first, http.StatusInternalServerError)
					transient := rw.name == DialectAdyen && f == FaultStored500
					assert.Equal(t, transient, first.header.Get(TransientErrorHeader) == "true", "transient-error")
				}
				want, ok := rw.out[f]
				if !ok { // before processing: nothing executed, the retry executes once
					want = outcome{retry: 201, charges: 1}
					assert.Equal(t, 0, s.ExecutionsByReference("r"))
				}
				retry := pay(t, s, rw.name, "k", 100, "r")
				wantStatus(t, retry, want.retry)
				if want.replay {
					assert.Equal(t, string(first.body), string(retry.body))
				}
				charged, canceled := s.ChargesByReference("r")
				assert.Equal(t, want.charges, charged, "charges")
				assert.Equal(t, 0, canceled)
				assert.Equal(t, want.charges, s.ExecutionsByReference("r"))
				if want.retry/100 == 2 {
					p := chargeOf(t, retry)
					e, ok := s.ExecutionByID(p.ID)
					require.True(t, ok)
					assert.Equal(t, "r", e.Reference)
				}
				if rw.name == DialectGoCardless && want.retry == http.StatusConflict {
					id, _ := at(t, retry.body, "error.errors.0.links.conflicting_resource_id").(string)
					require.NotEmpty(t, id)
					fetched := get(t, s, PaymentPath(id))
					wantStatus(t, fetched, http.StatusOK)
					assert.Equal(t, payment{ID: id, Amount: 100, Currency: "EUR", Customer: "cus_1", Reference: "r",
						Status: "succeeded"}, chargeOf(t, fetched))
				}
				if f.BeforeProcessing() || f == FaultNone {
					return
				}
				if f == FaultSlow {
					return
				}
				assert.Equal(t, 1, s.Stats().Faults[f], "the fault took effect once")
			})
		}
	}
}

// TestDialectUnknown: an unknown name is reported by ValidDialect and refused by NewHandler
// with a panic naming it; every listed name is valid.
func TestDialectUnknown(t *testing.T) {
	err := ValidDialect("stripe-v3")
	require.ErrorIs(t, err, ErrUnknownDialect)
	assert.Contains(t, err.Error(), `"stripe-v3"`)
	assert.NoError(t, ValidDialect(""))
	assert.Equal(t, []string{"idem", "ietf", "stripe", "stripe-v2", "adyen", "paypal", "checkout", "gocardless",
		"square", "increase"}, Dialects())
	for _, name := range Dialects() {
		assert.NoError(t, ValidDialect(name))
		assert.NotEmpty(t, KeyCarrier(name))
		h := NewHandler(Config{Dialect: name})
		assert.Equal(t, name, h.Dialect())
		h.Close()
	}
	assert.Equal(t, DialectIdem, NewHandler(Config{}).Dialect())
	assert.Empty(t, KeyCarrier("nope"))
	assert.PanicsWithValue(t, err.Error(), func() { NewHandler(Config{Dialect: "stripe-v3"}) })
}

// TestDialectKeyHeaderOverride: Config.KeyHeader replaces a header carrier.
func TestDialectKeyHeaderOverride(t *testing.T) {
	s, _ := dialectServer(t, DialectPayPal, Config{KeyHeader: "X-Request-Id"})
	body := paymentBody(1, "r")
	wantStatus(t, raw(t, s.URL, http.MethodPost, PaymentsPath, "X-Request-Id", "k", body), http.StatusCreated)
	wantStatus(t, raw(t, s.URL, http.MethodPost, PaymentsPath, "X-Request-Id", "k", body), http.StatusOK)
	assert.Equal(t, 2, s.AttemptsFor("k"))
	assert.Equal(t, 1, s.ExecutionsFor("k"))
}

// TestSquareFingerprintIgnoresKeyField: square compares the request without its
// idempotency_key field, and not the bytes: reordered fields are the same request.
func TestSquareFingerprintIgnoresKeyField(t *testing.T) {
	s, _ := dialectServer(t, DialectSquare, Config{})
	a := `{"idempotency_key":"k","amount":1,"currency":"EUR","customer":"c","reference":"r"}`
	b := `{"reference":"r","customer":"c","currency":"EUR","amount":1, "idempotency_key":"k"}`
	first := raw(t, s.URL, http.MethodPost, PaymentsPath, "", "", a)
	wantStatus(t, first, http.StatusCreated)
	second := raw(t, s.URL, http.MethodPost, PaymentsPath, "", "", b)
	wantStatus(t, second, http.StatusCreated)
	assert.True(t, bytes.Equal(first.body, second.body))
	assert.Equal(t, 1, s.ExecutionsFor("k"))
	assert.Equal(t, 2, s.AttemptsFor("k"))
}
