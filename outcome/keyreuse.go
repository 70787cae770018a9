package outcome

import (
	"encoding/json"
	"net/http"
	"strings"
)

// The key-reuse rule. The IETF Idempotency-Key draft (§2.7) answers 422 when a key is reused
// with another payload, but many APIs answer 422 for any validation error: only a 422 whose
// body names key reuse is a key conflict, any other 422 is a validation failure
// (idem.ErrPermanent). Stripe answers key reuse with 400 and the error type idempotency_error
// (https://docs.stripe.com/api/idempotent_requests); a 400 is a key conflict only when its
// body names reuse precisely (see isKeyReuse400), since a 400 that merely mentions
// idempotency is usually a missing or malformed key.

// IsKeyReuse reports whether an error body names idempotency-key reuse: a JSON object whose
// "error", "code", "type" or "title" member (or "error.code", "error.type", or that member of
// an object in an "errors" array) is a string containing "idempotency" (case-insensitive), as
// in {"error":"idempotency_key_reused"}, {"errors":[{"code":"idempotency_key_reused"}]},
// Stripe's {"error":{"type":"idempotency_error"}} or an RFC 9457 problem type such as
// ".../idempotency-key-reuse". Anything else, including a body that is not JSON, is false.
// ClassifyStatusCode applies it to 422 answers. On a 400 it requires a stricter match: the
// member is "idempotency_error" (Stripe), or names idempotency together with "reuse" or
// "mismatch", since a 400 that merely mentions idempotency is usually a missing or malformed
// key.
func IsKeyReuse(body []byte) bool {
	for _, v := range errorCodes(body) {
		if strings.Contains(strings.ToLower(v), "idempotency") {
			return true
		}
	}
	return false
}

// isKeyReuse400 reports whether a 400 body names key reuse precisely: an error member (see
// IsKeyReuse) that is Stripe's "idempotency_error", or names idempotency together with
// "reuse" or "mismatch" (idempotency_key_reused, .../idempotency-key-reuse,
// IDEMPOTENCY_KEY_PAYLOAD_MISMATCH). "idempotency_key_missing" or ".../idempotency-key-invalid"
// are not: the request was refused for its key, not for its payload.
func isKeyReuse400(body []byte) bool {
	for _, v := range errorCodes(body) {
		v = strings.ToLower(v)
		if v == "idempotency_error" ||
			strings.Contains(v, "idempotency") && (strings.Contains(v, "reuse") || strings.Contains(v, "mismatch")) {
			return true
		}
	}
	return false
}

// keyReuseAnswer reports whether a is the server saying the key was used with another
// payload: a 422 whose body IsKeyReuse, or a 400 whose body isKeyReuse400.
func keyReuseAnswer(a *Attempt) bool {
	switch a.StatusCode() {
	case http.StatusUnprocessableEntity:
		return IsKeyReuse(a.Body)
	case http.StatusBadRequest:
		return isKeyReuse400(a.Body)
	}
	return false
}

// KeyConflictCodes returns a classifier for APIs that name key reuse their own way: a 400 or
// 422 whose "error", "code", "type" or "title" member (or "error.code", "error.type", or
// that member of an object in an "errors" array) equals one of codes exactly is
// ClassKeyConflict; anything else is undecided. Prepend it to DefaultClassifiers().
func KeyConflictCodes(codes ...string) Classifier {
	want := make(map[string]bool, len(codes))
	for _, c := range codes {
		want[c] = true
	}
	return ClassifierFunc(func(a *Attempt) Class {
		if code := a.StatusCode(); code != http.StatusUnprocessableEntity && code != http.StatusBadRequest {
			return ClassUndecided
		}
		for _, v := range errorCodes(a.Body) {
			if want[v] {
				return ClassKeyConflict
			}
		}
		return ClassUndecided
	})
}

// errorCodes returns the string members of an error body that name what went wrong.
func errorCodes(body []byte) []string {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return nil
	}
	var out []string
	add := func(m map[string]json.RawMessage) {
		for _, name := range []string{"error", "code", "type", "title"} {
			var s string
			if raw, ok := m[name]; ok && json.Unmarshal(raw, &s) == nil {
				out = append(out, s)
			}
		}
	}
	add(top)
	var nested map[string]json.RawMessage
	if raw, ok := top["error"]; ok && json.Unmarshal(raw, &nested) == nil {
		add(nested)
	}
	var list []json.RawMessage
	if raw, ok := top["errors"]; ok && json.Unmarshal(raw, &list) == nil {
		for _, raw := range list {
			var m map[string]json.RawMessage
			if json.Unmarshal(raw, &m) == nil {
				add(m)
			}
		}
	}
	return out
}
