package idem

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/idemkit/idem/keystore"
)

// updateFinal writes a call's final state. When the store can defer the write
// (keystore.DeferredUpdater), the call does not wait for its sync: the one synchronous write
// of a successful call is the Create before the first byte. Losing that final write in a
// crash is safe by construction: the record is still pending, so the next Do or Recover asks
// the status endpoint, which reports the answer the server stored (or, without one, resends
// with the same key, which the server deduplicates); the same holds for a manual record (a
// stored 5xx is asked for again) and a pending one.
//
// A failed record is written synchronously. Its answer may be one the server never stored
// (a 401, a validation 400 made before the key was claimed): lost, the record would still be
// pending, the status endpoint would say "not found", and Recover would send the payment the
// application was told had failed, perhaps after it paid under a new intent.
//
// A manual record whose Lookup acts (a cancel by reference) is written synchronously too:
// the cancel follows, and a record still pending after a crash would be resent, and the
// provider's replay of the canceled charge taken for a success. The call's lease on it is
// then released: the cancel's claim (claimForCancel) is refused while another owner's lease
// is live, and the call's own has nothing left to guard.
func (c *Client) updateFinal(ctx context.Context, rec *keystore.Record) error {
	if d, ok := c.store.(keystore.DeferredUpdater); ok && rec.State != keystore.StateFailed &&
		(rec.State != keystore.StateManual || !c.dialect.lookupActs) {
		return d.UpdateDeferred(ctx, rec)
	}
	if err := c.store.Update(ctx, rec); err != nil {
		return err
	}
	if rec.State == keystore.StateManual && c.dialect.lookupActs && rec.Owner == c.cfg.Fleet.Owner {
		// Fenced: a record claimed since is left as it is. A failed release only makes the
		// cancel wait for the lease to expire.
		if err := c.store.Release(ctx, rec.Scope, rec.Key, c.cfg.Fleet.Owner, rec.Fence); err != nil && !errors.Is(err, keystore.ErrFenced) {
			c.warn("releasing the lease of a manual record", rec, err)
		}
	}
	return nil
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
