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
		if SecretHeader(k, secret) {
			delete(h, k)
		}
	}
}

// SecretHeader reports whether a header named name is kept out of a store: one of
// CredentialHeaders or of the names in the extra lists, matched case-insensitively, as
// StripSecrets and StoredCopy match them. A store that encodes a record without copying it
// first uses it to leave out what StoredCopy would have removed.
func SecretHeader(name string, extra ...[]string) bool {
	if isSecret(name, CredentialHeaders) {
		return true
	}
	for _, list := range extra {
		if isSecret(name, list) {
			return true
		}
	}
	return false
}

func isSecret(name string, secret []string) bool {
	for _, s := range secret {
		if strings.EqualFold(name, s) {
			return true
		}
	}
	return false
}
