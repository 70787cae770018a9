package idemtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/idemkit/idem/idemserver"
)

// paymentRequest is the body of POST /v1/payments.
type paymentRequest struct {
	Amount    int64  `json:"amount"`    // minor units, > 0
	Currency  string `json:"currency"`  // three uppercase letters
	Customer  string `json:"customer"`  // non-empty
	Reference string `json:"reference"` // optional
}

// payment is the stored 201 body.
type payment struct {
	ID        string `json:"id"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	Customer  string `json:"customer"`
	Reference string `json:"reference"`
	Status    string `json:"status"`
	// IdempotencyKey is the key the charge was made under, in the increase dialect's list by
	// key (Increase's objects carry it); omitted elsewhere.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// servePayment is the payment handler behind the middleware, which runs it only for a
// request that claimed a new key: validation, the faults that act inside the server (slow,
// stored 500s), execution. A validation failure is answered before execution began
// (idemserver.NotExecuted), so the key is released and nothing is stored.
func (h *Handler) servePayment(w http.ResponseWriter, r *http.Request, path string) {
	a := arrivalOf(r)
	body, err := io.ReadAll(r.Body) // the middleware already read and bounded it
	if err != nil {
		_ = idemserver.NotExecuted(r)
		h.badRequest(w, http.StatusBadRequest, errorBody{Error: "invalid_request", Message: "reading body: " + err.Error()})
		return
	}
	req, invalid := parsePayment(body)
	if invalid != nil {
		_ = idemserver.NotExecuted(r)
		h.badRequest(w, http.StatusBadRequest, *invalid)
		return
	}
	if a.fault == FaultSlow {
		h.countFault(a.fault)
		if !h.wait() {
			_ = idemserver.NotExecuted(r)
			writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: "shutting_down"})
			return
		}
	}
	sc, _ := idemserver.KeyScope(r)
	switch a.fault {
	case FaultStored500, FaultStored500AfterCharge:
		h.countFault(a.fault)
		if a.fault == FaultStored500AfterCharge {
			h.charge(sc.Tenant, path, sc.Key, req, a.seq)
		}
		writeJSON(w, http.StatusInternalServerError,
			errorBody{Error: "internal", Message: "the payment failed; this result is stored for the idempotency key"})
		return
	case FaultDropAfterCommit, Fault500AfterCommit:
		a.acted = true // the arrival wrapper replaces the answer once it is stored
	}
	id := h.charge(sc.Tenant, path, sc.Key, req, a.seq)
	writeJSON(w, http.StatusCreated, payment{ID: id, Amount: req.Amount, Currency: req.Currency, Customer: req.Customer,
		Reference: req.Reference, Status: "succeeded"})
}

// wait holds a FaultSlow request for SlowDelay, whether or not the client is still there.
// It returns false if the handler was closed first.
func (h *Handler) wait() bool {
	select {
	case <-h.done:
		return false
	default:
	}
	if h.cfg.SlowDelay <= 0 {
		return true
	}
	t := time.NewTimer(h.cfg.SlowDelay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-h.done:
		return false
	}
}

// badRequest answers a 400 or 413, which stores nothing.
func (h *Handler) badRequest(w http.ResponseWriter, status int, e errorBody) {
	h.mu.Lock()
	h.stats.BadRequests++
	h.mu.Unlock()
	writeJSON(w, status, e)
}

// parsePayment decodes and validates a payment body.
func parsePayment(body []byte) (paymentRequest, *errorBody) {
	var req paymentRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		e := &errorBody{Error: "invalid_request", Message: "body is not a valid payment JSON object: " + err.Error()}
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			e.Param = te.Field
		}
		return req, e
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, &errorBody{Error: "invalid_request", Message: "unexpected data after the JSON object"}
	}
	switch {
	case req.Amount <= 0:
		return req, &errorBody{Error: "invalid_request", Param: "amount", Message: "amount must be a positive integer in minor units"}
	case !isCurrency(req.Currency):
		return req, &errorBody{Error: "invalid_request", Param: "currency", Message: "currency must be three uppercase letters"}
	case req.Customer == "":
		return req, &errorBody{Error: "invalid_request", Param: "customer", Message: "customer is required"}
	}
	return req, nil
}

func isCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := range len(s) {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}
