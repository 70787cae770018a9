package keystore

import (
	"net/http"
	"strings"
)

// CredentialHeaders are never written to a store, whatever the caller asks: they carry
// credentials that must not outlive the process (Authorization, Cookie, Proxy-Authorization).
var CredentialHeaders = []string{"Authorization", "Cookie", "Proxy-Authorization"}

// StripSecrets returns a copy of h without CredentialHeaders and without the extra headers
// named in secret, matched case-insensitively: a key that is not in canonical form (set by
// assigning to the map directly, such as h["authorization"]) is removed too. h is not modified.
func StripSecrets(h http.Header, secret ...string) http.Header {
	if h == nil {
		return nil
	}
	out := h.Clone()
	stripInPlace(out, secret)
	return out
}

// stripInPlace deletes the secret headers from h itself.
func stripInPlace(h http.Header, secret []string) {
	for k := range h {
		if isSecret(k, CredentialHeaders) || isSecret(k, secret) {
			delete(h, k)
		}
	}
}

func isSecret(name string, secret []string) bool {
	for _, s := range secret {
		if strings.EqualFold(name, s) {
			return true
		}
	}
	return false
}
