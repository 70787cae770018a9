package keystore

import "net/http"

// CredentialHeaders are never written to a store, whatever the caller asks: they carry
// credentials that must not outlive the process (Authorization, Cookie, Proxy-Authorization).
var CredentialHeaders = []string{"Authorization", "Cookie", "Proxy-Authorization"}

// StripSecrets returns a copy of h without CredentialHeaders and without the extra headers
// named in secret (matched case-insensitively, as http.Header does). h is not modified.
func StripSecrets(h http.Header, secret ...string) http.Header {
	if h == nil {
		return nil
	}
	out := h.Clone()
	for _, name := range CredentialHeaders {
		out.Del(name)
	}
	for _, name := range secret {
		out.Del(name)
	}
	return out
}
