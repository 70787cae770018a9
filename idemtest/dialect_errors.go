package idemtest

import "net/http"

// errKind is an error answer of a dialect on idemtest's own key store, rendered in the
// provider's format by dialect.errs.
type errKind int

const (
	errMissingKey  errKind = iota // no key: 400 (422 for checkout)
	errInvalidKey                 // empty, malformed, repeated or too long: 400 (422 for checkout)
	errInvalidBody                // the payment failed validation: 400 (422 for checkout, gocardless)
	errTooLarge                   // body over 1 MiB: 413
	errInProgress                 // the key's first request still runs: 409
	errKeyReused                  // the key was used with another body
	errConflict                   // gocardless: the key created a payment (the pointer)
	errInternal                   // a 500 of a stored-500 or 500-after-commit fault
	errNotFound                   // a lookup found no such payment: 404
	errUnavailable                // the handler was closed during FaultSlow: 503
)

// apiError is one error answer before rendering.
type apiError struct {
	kind    errKind
	message string // "" means the kind's default text
	param   string // the offending field, for errInvalidBody
	id      string // the charge the key made, for errKeyReused and errConflict
	key     string // the idempotency key, if known
}

var defaultMessages = map[errKind]string{
	errMissingKey:  "an idempotency key is required",
	errInvalidKey:  "the idempotency key is empty, malformed, repeated or too long",
	errInvalidBody: "the payment is invalid",
	errTooLarge:    "the request body is too large",
	errInProgress:  "a request with this idempotency key is still in progress; retry later",
	errKeyReused:   "this idempotency key was already used with another request",
	errConflict:    "a resource has already been created with this idempotency key",
	errInternal:    "the payment failed",
	errNotFound:    "no such payment",
	errUnavailable: "the server is shutting down",
}

func (e apiError) text() string {
	if e.message != "" {
		return e.message
	}
	return defaultMessages[e.kind]
}

// plainStatus is the status of the kinds whose code is the same in every dialect.
var plainStatus = map[errKind]int{
	errTooLarge:    http.StatusRequestEntityTooLarge,
	errInProgress:  http.StatusConflict,
	errInternal:    http.StatusInternalServerError,
	errNotFound:    http.StatusNotFound,
	errUnavailable: http.StatusServiceUnavailable,
}

// status is the kind's code, or fallback for the kinds a dialect chooses (400s and conflicts).
func (e apiError) status(fallback int) int {
	if s, ok := plainStatus[e.kind]; ok {
		return s
	}
	return fallback
}

// stripeError: {"error":{"type","code","message","param"}}; key reuse is 400 idempotency_error.
func stripeError(e apiError) (int, any) {
	typ, code := "invalid_request_error", ""
	switch e.kind {
	case errInProgress:
		typ, code = "idempotency_error", "idempotency_key_in_use"
	case errKeyReused:
		typ = "idempotency_error"
		e.message = "Keys for idempotent requests can only be used with the same parameters they were first used with. " +
			"Try using a key other than '" + e.key + "' if you meant to execute a different request."
	case errInternal, errUnavailable:
		typ = "api_error"
	case errNotFound:
		code = "resource_missing"
	case errMissingKey:
		code = "parameter_missing"
	case errInvalidKey, errInvalidBody:
		code = "parameter_invalid"
	}
	return e.status(http.StatusBadRequest), map[string]any{"error": omitEmpty(map[string]string{
		"type": typ, "code": code, "message": e.text(), "param": e.param})}
}

// adyenError: {"status","errorCode","message","errorType"}; in progress 409 and key reuse 422,
// both errorCode 704.
func adyenError(e apiError) (int, any) {
	status, code, typ := e.status(http.StatusBadRequest), "702", "validation"
	switch e.kind {
	case errInProgress:
		code, e.message = "704", "request already processed or in progress"
	case errKeyReused:
		status, code, e.message = http.StatusUnprocessableEntity, "704", "request already processed or in progress"
	case errInternal, errUnavailable:
		code, typ = "000", "internal"
	case errNotFound:
		code = "000"
	}
	return status, map[string]any{"status": status, "errorCode": code, "message": e.text(), "errorType": typ}
}

// paypalError: {"name","message","details":[{"issue","description","field"}]}; key reuse is
// 422 UNPROCESSABLE_ENTITY / PAYPAL_REQUEST_ID_PREVIOUSLY_USED.
func paypalError(e apiError) (int, any) {
	status, name, issue := e.status(http.StatusBadRequest), "INVALID_REQUEST", "INVALID_PARAMETER_VALUE"
	switch e.kind {
	case errMissingKey:
		issue = "MISSING_REQUIRED_PARAMETER"
	case errInProgress:
		name, issue = "RESOURCE_CONFLICT", "PREVIOUS_REQUEST_IN_PROGRESS"
	case errKeyReused:
		status, name, issue = http.StatusUnprocessableEntity, "UNPROCESSABLE_ENTITY", "PAYPAL_REQUEST_ID_PREVIOUSLY_USED"
	case errInternal, errUnavailable:
		name, issue = "INTERNAL_SERVER_ERROR", "INTERNAL_SERVICE_ERROR"
	case errNotFound:
		name, issue = "RESOURCE_NOT_FOUND", "INVALID_RESOURCE_ID"
	}
	return status, map[string]any{"name": name, "message": e.text(),
		"details": []map[string]string{omitEmpty(map[string]string{"issue": issue, "field": e.param, "description": e.text()})}}
}

// checkoutError: {"error_type","error_codes":[...]}; validation is 422 request_invalid.
func checkoutError(e apiError) (int, any) {
	status, typ, code := e.status(http.StatusUnprocessableEntity), "request_invalid", "payment_invalid"
	switch e.kind {
	case errMissingKey:
		code = "idempotency_key_required"
	case errInvalidKey:
		code = "idempotency_key_invalid"
	case errInvalidBody:
		if e.param != "" {
			code = e.param + "_invalid"
		}
	case errInProgress:
		typ, code = "request_in_progress", "idempotency_key_in_progress"
	case errKeyReused:
		code = "idempotency_key_reused"
	case errInternal, errUnavailable:
		typ, code = "internal_server_error", "internal_error"
	case errNotFound:
		typ, code = "resource_not_found", "payment_not_found"
	}
	return status, map[string]any{"error_type": typ, "error_codes": []string{code}}
}

// gocardlessError: {"error":{"message","type","code","errors":[{"reason","message","field",
// "links"}]}}; the conflict is 409 invalid_state / idempotent_creation_conflict with
// error.errors[0].links.conflicting_resource_id.
func gocardlessError(e apiError) (int, any) {
	status, typ, reason := e.status(http.StatusBadRequest), "invalid_api_usage", "invalid_document_structure"
	item := map[string]any{}
	switch e.kind {
	case errMissingKey, errInvalidKey:
		reason = "invalid_idempotency_key"
	case errInvalidBody:
		status, typ, reason = http.StatusUnprocessableEntity, "validation_failed", "invalid"
		if e.param != "" {
			item["field"] = e.param
		}
	case errInProgress:
		typ, reason = "invalid_state", "idempotent_creation_in_progress"
	case errConflict:
		status, typ, reason = http.StatusConflict, "invalid_state", "idempotent_creation_conflict"
		item["links"] = map[string]string{"conflicting_resource_id": e.id}
	case errInternal, errUnavailable:
		typ, reason = "gocardless", "internal_error"
	case errNotFound:
		reason = "resource_not_found"
	}
	item["reason"], item["message"] = reason, e.text()
	return status, map[string]any{"error": map[string]any{
		"message": e.text(), "type": typ, "code": status, "errors": []map[string]any{item}}}
}

// squareError: {"errors":[{"category","code","detail","field"}]}; key reuse is 400
// IDEMPOTENCY_KEY_REUSED.
func squareError(e apiError) (int, any) {
	cat, code := "INVALID_REQUEST_ERROR", "INVALID_VALUE"
	switch e.kind {
	case errMissingKey:
		code, e.param = "MISSING_REQUIRED_PARAMETER", "idempotency_key"
	case errInvalidKey:
		code, e.param = "INVALID_VALUE", "idempotency_key"
	case errTooLarge:
		code = "REQUEST_ENTITY_TOO_LARGE"
	case errInProgress:
		code = "CONFLICT"
	case errKeyReused:
		code = "IDEMPOTENCY_KEY_REUSED"
	case errInternal, errUnavailable:
		cat, code = "API_ERROR", "INTERNAL_SERVER_ERROR"
	case errNotFound:
		code = "NOT_FOUND"
	}
	return e.status(http.StatusBadRequest), map[string]any{"errors": []map[string]string{
		omitEmpty(map[string]string{"category": cat, "code": code, "detail": e.text(), "field": e.param})}}
}

// increaseError: {"type","title","detail","status","resource_id"}; key reuse is 409
// idempotency_key_already_used_error with the key's resource_id.
func increaseError(e apiError) (int, any) {
	status, typ := e.status(http.StatusBadRequest), "invalid_parameters_error"
	switch e.kind {
	case errTooLarge:
		typ = "malformed_request_error"
	case errInProgress:
		typ = "idempotency_key_in_progress_error"
	case errKeyReused:
		status, typ = http.StatusConflict, "idempotency_key_already_used_error"
	case errInternal, errUnavailable:
		typ = "internal_server_error"
	case errNotFound:
		typ = "object_not_found_error"
	}
	body := map[string]any{"type": typ, "title": e.text(), "status": status}
	if e.param != "" {
		body["detail"] = "invalid parameter: " + e.param
	}
	if e.kind == errKeyReused && e.id != "" {
		body["resource_id"] = e.id
	}
	return status, body
}

// omitEmpty drops the empty values of m.
func omitEmpty(m map[string]string) map[string]string {
	for k, v := range m {
		if v == "" {
			delete(m, k)
		}
	}
	return m
}
