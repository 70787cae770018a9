package idemtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxBodyBytes bounds a payment request body.
const maxBodyBytes = 1 << 20

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
}

// servePayment handles POST <path>: fault, key, claim, validation, execution.
func (h *Handler) servePayment(w http.ResponseWriter, r *http.Request, path string) {
	if h.cfg.OnPayment != nil {
		h.cfg.OnPayment(r)
	}
	key, keyErr := parseKey(r.Header.Values(h.cfg.KeyHeader))

	h.mu.Lock()
	h.stats.Requests++
	if keyErr == nil {
		h.attemptsFor[key]++
	}
	fault := h.nextFaultLocked()
	h.mu.Unlock()

	if fault.BeforeProcessing() {
		h.injectBefore(w, fault)
		return
	}
	if keyErr != nil {
		h.badRequest(w, http.StatusBadRequest, *keyErr)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			h.badRequest(w, http.StatusRequestEntityTooLarge, errorBody{Error: "request_too_large"})
			return
		}
		h.badRequest(w, http.StatusBadRequest, errorBody{Error: "invalid_request", Message: "reading body: " + err.Error()})
		return
	}

	sc := scope{tenant: r.Header.Get("Authorization"), path: path, key: key}
	rec, outcome, stored := h.claim(sc, fingerprint(r.Method, path, body))
	switch outcome {
	case conflict:
		writeJSON(w, http.StatusUnprocessableEntity, errorBody{
			Error:   "idempotency_key_reused",
			Message: fmt.Sprintf("idempotency key %q was already used with another request (method, path or body)", key),
		})
		return
	case inProgress:
		w.Header().Set("Retry-After", h.retryAfter())
		writeJSON(w, http.StatusConflict, errorBody{Error: "request_in_progress", Message: "a request with this idempotency key is in progress"})
		return
	case completed:
		stored.write(w, true)
		return
	}

	req, invalid := parsePayment(body)
	if invalid != nil {
		h.release(sc, rec)
		h.badRequest(w, http.StatusBadRequest, *invalid)
		return
	}
	if fault == FaultSlow {
		h.countFault(fault)
		if !h.wait() {
			h.release(sc, rec)
			writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: "shutting_down"})
			return
		}
	}
	res := h.execute(sc, rec, req, fault)
	switch fault {
	case FaultDropAfterCommit:
		h.countFault(fault)
		resetConn(w)
	case Fault500AfterCommit:
		h.countFault(fault)
		writeJSON(w, http.StatusInternalServerError, errorBody{Error: "internal"})
	case FaultStored500, FaultStored500AfterCharge:
		h.countFault(fault)
		res.write(w, false)
	default:
		res.write(w, false)
	}
}

// execute runs a validated payment under the claim rec and stores its result: normally a
// ledger entry and 201; with FaultStored500, no ledger entry and a stored 500; with
// FaultStored500AfterCharge, a ledger entry and a stored 500.
func (h *Handler) execute(sc scope, rec *record, req paymentRequest, fault Fault) result {
	h.mu.Lock()
	defer h.mu.Unlock()
	var res result
	if fault == FaultStored500 || fault == FaultStored500AfterCharge {
		if fault == FaultStored500AfterCharge {
			h.executions = append(h.executions, Execution{
				ID: "pay_" + strconv.Itoa(len(h.executions)+1), Tenant: sc.tenant, Path: sc.path, Key: sc.key,
				Reference: req.Reference, Amount: req.Amount, Currency: req.Currency, Customer: req.Customer, At: h.cfg.Now(),
			})
		}
		res = result{
			status:      http.StatusInternalServerError,
			contentType: "application/json",
			body:        mustJSON(errorBody{Error: "internal", Message: "the payment failed; this result is stored for the idempotency key"}),
		}
	} else {
		id := "pay_" + strconv.Itoa(len(h.executions)+1)
		h.executions = append(h.executions, Execution{
			ID: id, Tenant: sc.tenant, Path: sc.path, Key: sc.key, Reference: req.Reference,
			Amount: req.Amount, Currency: req.Currency, Customer: req.Customer, At: h.cfg.Now(),
		})
		res = result{
			status:      http.StatusCreated,
			contentType: "application/json",
			body: mustJSON(payment{
				ID: id, Amount: req.Amount, Currency: req.Currency, Customer: req.Customer,
				Reference: req.Reference, Status: "succeeded",
			}),
		}
	}
	h.storeLocked(rec, res)
	return res
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

// parseKey reads the idempotency key from the header's values: a bare value or an RFC 8941
// sf-string, which is unquoted.
func parseKey(values []string) (string, *errorBody) {
	if len(values) > 1 {
		return "", &errorBody{Error: "invalid_idempotency_key", Message: "the idempotency key header must appear once"}
	}
	var v string
	if len(values) == 1 {
		v = strings.Trim(values[0], " \t")
	}
	if strings.HasPrefix(v, `"`) {
		s, ok := unquoteSFString(v)
		if !ok {
			return "", &errorBody{Error: "invalid_idempotency_key", Message: "malformed RFC 8941 string"}
		}
		v = s
	}
	switch {
	case v == "":
		return "", &errorBody{Error: "missing_idempotency_key", Message: "an idempotency key header is required"}
	case len(v) > MaxKeyLength:
		return "", &errorBody{Error: "invalid_idempotency_key", Message: fmt.Sprintf("the idempotency key is longer than %d bytes", MaxKeyLength)}
	}
	return v, nil
}

// unquoteSFString parses s as exactly one RFC 8941 sf-string (section 3.3.3): DQUOTE, then
// printable ASCII with only \" and \\ escaped, then DQUOTE.
func unquoteSFString(s string) (string, bool) {
	if len(s) < 2 || s[0] != '"' {
		return "", false
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i >= len(s) || (s[i] != '"' && s[i] != '\\') {
				return "", false
			}
			b.WriteByte(s[i])
		case c == '"':
			return b.String(), i == len(s)-1
		case c < 0x20 || c > 0x7e:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return "", false // no closing quote
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
