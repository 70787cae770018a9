package idem

import (
	"context"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/idemkit/idem/keystore"
)

// updateFinal writes a call's final state. When the store can defer the write
// (keystore.DeferredUpdater), the call does not wait for its sync: the one synchronous write
// of a call is the Create before the first byte. Losing the final write in a crash is safe by
// construction: the record is still pending, so the next Do or Recover asks the status
// endpoint (or, without one, resends with the same key, which the server deduplicates).
func (c *Client) updateFinal(ctx context.Context, rec *keystore.Record) error {
	if d, ok := c.store.(keystore.DeferredUpdater); ok {
		return d.UpdateDeferred(ctx, rec)
	}
	return c.store.Update(ctx, rec)
}

// withoutSecrets is keystore.StripSecrets(h, secret...) that returns h itself when it holds
// no secret header: the store copies what it keeps, so the copy is only needed to drop one.
func withoutSecrets(h http.Header, secret ...string) http.Header {
	for k := range h {
		if isSecretHeader(k, keystore.CredentialHeaders) || isSecretHeader(k, secret) {
			return keystore.StripSecrets(h, secret...)
		}
	}
	return h
}

func isSecretHeader(name string, secret []string) bool {
	for _, s := range secret {
		if strings.EqualFold(name, s) {
			return true
		}
	}
	return false
}

// cleanHeader reports whether a response header can be persisted as it is: no secret
// header (credentials, Set-Cookie, secret) and only UTF-8.
func cleanHeader(h http.Header, secret []string) bool {
	for k, vs := range h {
		if isSecretHeader(k, keystore.CredentialHeaders) || isSecretHeader(k, keystore.ResponseSecretHeaders) ||
			isSecretHeader(k, secret) || !utf8.ValidString(k) {
			return false
		}
		for _, v := range vs {
			if !utf8.ValidString(v) {
				return false
			}
		}
	}
	return true
}
