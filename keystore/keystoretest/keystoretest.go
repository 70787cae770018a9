// Package keystoretest is the conformance suite that every keystore.Store backend passes.
//
// A backend's test calls Run with a function that opens a new, empty store:
//
//	func TestConformance(t *testing.T) {
//		keystoretest.Run(t, func(t *testing.T) keystore.Store { return keystore.NewMemory() })
//	}
//
// The suite uses only the standard library, so importing it adds no dependency.
package keystoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
)

// Run runs every conformance case as a subtest of t, the fleet cases included (one handle
// then plays both instances). open is called once per subtest and must return a new, empty
// store; Run closes it when the subtest ends (an ErrClosed from that Close is ignored, since
// some cases close the store themselves).
func Run(t *testing.T, open func(t *testing.T) keystore.Store) {
	cases := []struct {
		name string
		fn   func(t *testing.T, s keystore.Store)
	}{
		{"CreateGet", testCreateGet},
		{"CreateDuplicateKey", testCreateDuplicateKey},
		{"CreateDuplicateIntent", testCreateDuplicateIntent},
		{"ConcurrentCreateSameKey", testConcurrentCreateSameKey},
		{"ConcurrentCreateSameIntent", testConcurrentCreateSameIntent},
		{"UpdateRoundTrip", testUpdateRoundTrip},
		{"UpdateMissing", testUpdateMissing},
		{"UpdateImmutable", testUpdateImmutable},
		{"ScopeIsolation", testScopeIsolation},
		{"GetByIntent", testGetByIntent},
		{"Invalid", testInvalid},
		{"List", testList},
		{"Purge", testPurge},
		{"Secrets", testSecrets},
		{"Copies", testCopies},
		{"Closed", testClosed},
		{"ContextCanceled", testContextCanceled},
		{"ConcurrentMixed", testConcurrentMixed},
		{"LeaseClosed", testLeaseClosed},

		// Optional capabilities (extensions.go): skipped when the store lacks them.
		{"UpdateDeferred", testUpdateDeferred},
		{"ListPage", testListPage},
		{"PurgeBatch", testPurgeBatch},
		{"UpdateFromState", testUpdateFromState},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { closeStore(t, s) })
			c.fn(t, s)
		})
	}
	for _, c := range fleetCases {
		t.Run(c.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { closeStore(t, s) })
			c.fn(t, s, s)
		})
	}
}

// RunShared runs the fleet cases (claims, leases, fencing, orphan reclaim, intent uniqueness)
// with two handles on one new, empty store, as two instances of a fleet see it: open returns
// both, and RunShared closes both when the subtest ends. Run already runs the same cases with
// one handle playing both instances; a backend that several processes share (a database)
// should call RunShared too.
func RunShared(t *testing.T, open func(t *testing.T) (a, b keystore.Store)) {
	for _, c := range fleetCases {
		t.Run(c.name, func(t *testing.T) {
			a, b := open(t)
			t.Cleanup(func() { closeStore(t, a); closeStore(t, b) })
			c.fn(t, a, b)
		})
	}
}

func closeStore(t *testing.T, s keystore.Store) {
	if err := s.Close(); err != nil && !errors.Is(err, keystore.ErrClosed) {
		t.Errorf("Close: %v", err)
	}
}

// base is the CreatedAt of sample records: nanoseconds and a non-UTC zone, so that a backend
// that drops either fails the equality checks.
var base = time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.FixedZone("UTC+1", 3600))

// sample returns a pending record with every request field set. The body holds every byte
// value, so that an encoding that is not binary-safe fails.
func sample(scope, key string) *keystore.Record {
	body := make([]byte, 0, 256+len(key))
	for i := range 256 {
		body = append(body, byte(i))
	}
	body = append(body, key...)
	return &keystore.Record{
		Scope:       scope,
		Key:         key,
		Fingerprint: fmt.Sprintf("%064x", len(key)),
		Request: keystore.Request{
			Method: http.MethodPost,
			URL:    "/v1/payments?expand=charges",
			Header: http.Header{
				"Content-Type":    {"application/json"},
				"Idempotency-Key": {key},
				"X-Multi":         {"one", "two", ""},
			},
			Body: body,
		},
		State:     keystore.StatePending,
		CreatedAt: base,
		UpdatedAt: base,
	}
}

// completed returns rec moved to state with a response, as a client records a final outcome.
func completed(rec *keystore.Record, state keystore.State, at time.Time) *keystore.Record {
	c := rec.Clone()
	c.State = state
	c.Attempts = 3
	c.LastStatusCode = 201
	c.Error = "first attempt: connection reset after write"
	c.Reason = "executed"
	c.Note = "found by reference order-42 (ticket OPS-7)"
	c.Response = &keystore.Response{
		StatusCode: 201,
		Header:     http.Header{"Content-Type": {"application/json"}, "Request-Id": {"req_1"}},
		Body:       []byte(`{"id":"pay_1","amount":1000}`),
	}
	c.UpdatedAt = at
	return c
}

func mustCreate(t *testing.T, s keystore.Store, rec *keystore.Record) {
	t.Helper()
	if err := s.Create(context.Background(), rec); err != nil {
		t.Fatalf("Create(%q, %q): %v", rec.Scope, rec.Key, err)
	}
}

func mustUpdate(t *testing.T, s keystore.Store, rec *keystore.Record) {
	t.Helper()
	if err := s.Update(context.Background(), rec); err != nil {
		t.Fatalf("Update(%q, %q): %v", rec.Scope, rec.Key, err)
	}
}

func mustGet(t *testing.T, s keystore.Store, scope, key string) *keystore.Record {
	t.Helper()
	rec, err := s.Get(context.Background(), scope, key)
	if err != nil {
		t.Fatalf("Get(%q, %q): %v", scope, key, err)
	}
	return rec
}

// wantErr fails t unless errors.Is(err, target).
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want %v", what, err, target)
	}
}

// wantEqual fails t unless got equals want field by field (see Diff).
func wantEqual(t *testing.T, what string, want, got *keystore.Record) {
	t.Helper()
	if d := Diff(want, got); d != "" {
		t.Fatalf("%s: record differs: %s", what, d)
	}
}

// Diff describes the first difference between two records, or returns "" if they are equal:
// every field exactly, times with time.Time.Equal, and a nil header or body equal to an empty
// one (an encoding may not tell them apart).
func Diff(want, got *keystore.Record) string {
	switch {
	case want == nil || got == nil:
		if want != got {
			return fmt.Sprintf("want %v, got %v", want, got)
		}
		return ""
	case want.Scope != got.Scope:
		return fmt.Sprintf("Scope: want %q, got %q", want.Scope, got.Scope)
	case want.Key != got.Key:
		return fmt.Sprintf("Key: want %q, got %q", want.Key, got.Key)
	case want.Intent != got.Intent:
		return fmt.Sprintf("Intent: want %q, got %q", want.Intent, got.Intent)
	case want.Fingerprint != got.Fingerprint:
		return fmt.Sprintf("Fingerprint: want %q, got %q", want.Fingerprint, got.Fingerprint)
	case want.Request.Method != got.Request.Method:
		return fmt.Sprintf("Request.Method: want %q, got %q", want.Request.Method, got.Request.Method)
	case want.Request.URL != got.Request.URL:
		return fmt.Sprintf("Request.URL: want %q, got %q", want.Request.URL, got.Request.URL)
	case !headerEqual(want.Request.Header, got.Request.Header):
		return fmt.Sprintf("Request.Header: want %v, got %v", want.Request.Header, got.Request.Header)
	case !bytes.Equal(want.Request.Body, got.Request.Body):
		return fmt.Sprintf("Request.Body: want %q, got %q", want.Request.Body, got.Request.Body)
	case want.State != got.State:
		return fmt.Sprintf("State: want %q, got %q", want.State, got.State)
	case want.Attempts != got.Attempts:
		return fmt.Sprintf("Attempts: want %d, got %d", want.Attempts, got.Attempts)
	case want.LastStatusCode != got.LastStatusCode:
		return fmt.Sprintf("LastStatusCode: want %d, got %d", want.LastStatusCode, got.LastStatusCode)
	case want.Reason != got.Reason:
		return fmt.Sprintf("Reason: want %q, got %q", want.Reason, got.Reason)
	case want.NotExecuted != got.NotExecuted:
		return fmt.Sprintf("NotExecuted: want %v, got %v", want.NotExecuted, got.NotExecuted)
	case want.Note != got.Note:
		return fmt.Sprintf("Note: want %q, got %q", want.Note, got.Note)
	case want.Error != got.Error:
		return fmt.Sprintf("Error: want %q, got %q", want.Error, got.Error)
	case !want.CreatedAt.Equal(got.CreatedAt):
		return fmt.Sprintf("CreatedAt: want %v, got %v", want.CreatedAt, got.CreatedAt)
	case !want.UpdatedAt.Equal(got.UpdatedAt):
		return fmt.Sprintf("UpdatedAt: want %v, got %v", want.UpdatedAt, got.UpdatedAt)
	case want.Owner != got.Owner:
		return fmt.Sprintf("Owner: want %q, got %q", want.Owner, got.Owner)
	case !want.LeaseUntil.Equal(got.LeaseUntil):
		return fmt.Sprintf("LeaseUntil: want %v, got %v", want.LeaseUntil, got.LeaseUntil)
	case want.Fence != got.Fence:
		return fmt.Sprintf("Fence: want %d, got %d", want.Fence, got.Fence)
	case (want.Response == nil) != (got.Response == nil):
		return fmt.Sprintf("Response: want %v, got %v", want.Response, got.Response)
	case want.Response == nil:
		return ""
	case want.Response.StatusCode != got.Response.StatusCode:
		return fmt.Sprintf("Response.Status: want %d, got %d", want.Response.StatusCode, got.Response.StatusCode)
	case !headerEqual(want.Response.Header, got.Response.Header):
		return fmt.Sprintf("Response.Header: want %v, got %v", want.Response.Header, got.Response.Header)
	case !bytes.Equal(want.Response.Body, got.Response.Body):
		return fmt.Sprintf("Response.Body: want %q, got %q", want.Response.Body, got.Response.Body)
	}
	return ""
}

func headerEqual(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		vb, ok := b[k]
		if !ok || !slices.Equal(va, vb) {
			return false
		}
	}
	return true
}
