package keystore

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// This file holds the rules every backend applies the same way, so that Memory, the bbolt
// file store and any adapter behave identically under the conformance suite.

// ResponseSecretHeaders are removed from a persisted Response in addition to
// CredentialHeaders: a Set-Cookie carries a session credential.
var ResponseSecretHeaders = []string{"Set-Cookie"}

// StoredCopy returns the deep copy of rec that a backend persists: Request.Header without
// CredentialHeaders and the extra names in secret, Response.Header also without
// ResponseSecretHeaders. rec is not modified. StoredCopy(nil) is nil.
func StoredCopy(rec *Record, secret ...string) *Record {
	c := rec.Clone()
	if c == nil {
		return nil
	}
	// c owns its headers (Clone is deep), so strip them in place: no second copy.
	stripInPlace(c.Request.Header, secret)
	if c.Response != nil {
		stripInPlace(c.Response.Header, secret)
		stripInPlace(c.Response.Header, ResponseSecretHeaders)
	}
	return c
}

// CheckImmutable returns an error wrapping ErrInvalid if next changes a field of stored that
// Update must keep: Scope, Key, Intent or Fingerprint; then a *FencedError if next.Fence is
// not the stored Fence (see CheckFence). It returns nil otherwise.
func CheckImmutable(stored, next *Record) error {
	switch {
	case stored.Scope != next.Scope || stored.Key != next.Key:
		return errors.Join(ErrInvalid, errors.New("scope and key cannot change"))
	case stored.Intent != next.Intent:
		return errors.Join(ErrInvalid, errors.New("intent cannot change"))
	case stored.Fingerprint != next.Fingerprint:
		return errors.Join(ErrInvalid, errors.New("fingerprint cannot change"))
	}
	return CheckFence(stored, next)
}

// Purgeable reports whether Purge(ctx, cutoff) deletes rec: a terminal state and an UpdatedAt
// strictly before cutoff.
func Purgeable(rec *Record, cutoff time.Time) bool {
	return rec.State.Terminal() && rec.UpdatedAt.Before(cutoff)
}

// SortRecords sorts recs in List order: CreatedAt, then Key, then Scope.
func SortRecords(recs []*Record) {
	slices.SortFunc(recs, compareRecords)
}

// compareRecords orders records as List does: CreatedAt, then Key, then Scope.
func compareRecords(a, b *Record) int {
	if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
		return c
	}
	if c := strings.Compare(a.Key, b.Key); c != 0 {
		return c
	}
	return strings.Compare(a.Scope, b.Scope)
}

// CheckHeaderText returns an error naming the header if a name or value in h is not valid
// UTF-8 (what says which header set: "request" or "response"). Backends that store headers
// as text (JSON, PostgreSQL) refuse such a record before writing, with ErrInvalid.
func CheckHeaderText(what string, h http.Header) error {
	for k, vs := range h {
		if !utf8.ValidString(k) {
			return fmt.Errorf("%s header name %q is not valid UTF-8", what, k)
		}
		for _, v := range vs {
			if !utf8.ValidString(v) {
				return fmt.Errorf("%s header %s: value is not valid UTF-8", what, k)
			}
		}
	}
	return nil
}
