package idem

import (
	"encoding/json"
	"net/http"
	"strings"
)

// The 422 rule. The IETF Idempotency-Key draft (§2.7) answers 422 when a key is reused with
// another payload, but many APIs answer 422 for any validation error. Only an answer that
// names key reuse is a key conflict; any other 422 is a validation failure (ErrPermanent).

// IsKeyReuse reports whether an error body names idempotency-key reuse: a JSON object whose
// "error", "code", "type" or "title" member (or "error.code", "error.type") is a string
// containing "idempotency" (case-insensitive), as in {"error":"idempotency_key_reused"},
// Stripe's {"error":{"type":"idempotency_error"}} or an RFC 9457 problem type such as
// ".../idempotency-key-reuse". Anything else, including a body that is not JSON, is false.
func IsKeyReuse(body []byte) bool {
	for _, v := range errorCodes(body) {
		if strings.Contains(strings.ToLower(v), "idempotency") {
			return true
		}
	}
	return false
}

// KeyConflictCodes returns a classifier for APIs that name key reuse their own way: a 422
// whose "error", "code", "type" or "title" member (or "error.code", "error.type") equals one
// of codes exactly is ClassKeyConflict; anything else is undecided. Prepend it to
// DefaultClassifiers().
func KeyConflictCodes(codes ...string) Classifier {
	want := make(map[string]bool, len(codes))
	for _, c := range codes {
		want[c] = true
	}
	return ClassifierFunc(func(a *Attempt) Class {
		if a.StatusCode() != http.StatusUnprocessableEntity {
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
	return out
}
