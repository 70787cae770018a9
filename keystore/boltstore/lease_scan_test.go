package boltstore

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
)

// TestSurelyNotOrphaned: ClaimExpired's pre-filter skips exactly the records that are not
// pending or hold a live lease, and is never fooled by the same words inside headers, bodies
// or other fields: for every case its answer agrees with the decoded record, and so do the
// scope, key and CreatedAt candidate reads from the bytes.
func TestSurelyNotOrphaned(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)
	base := func(mod func(r *keystore.Record)) *keystore.Record {
		r := &keystore.Record{Key: "k-1", Fingerprint: "fp", State: keystore.StatePending,
			Request:   keystore.Request{Method: http.MethodPost, URL: "/v1/charges", Body: []byte(`{"a":1}`)},
			CreatedAt: now.Add(-time.Hour), UpdatedAt: now.Add(-time.Hour)}
		mod(r)
		return r
	}
	tricky := http.Header{"Lease_until": {"2999-01-01T00:00:00Z"}, "State": {`"state":"pending"`}, "Owner": {`"owner":"x"`},
		"Created_at": {`"created_at":"1999-01-01T00:00:00Z"`}}
	cases := []struct {
		name string
		rec  *keystore.Record
		skip bool // surelyNotOrphaned must say so
	}{
		{"pending, never claimed", base(func(*keystore.Record) {}), false},
		{"pending, live lease", base(func(r *keystore.Record) { r.Owner, r.LeaseUntil, r.Fence = "a", now.Add(time.Minute), 1 }), true},
		{"pending, lease expired", base(func(r *keystore.Record) { r.Owner, r.LeaseUntil, r.Fence = "a", now.Add(-time.Minute), 1 }), false},
		{"pending, lease ends now", base(func(r *keystore.Record) { r.Owner, r.LeaseUntil, r.Fence = "a", now, 1 }), false},
		{"pending, released", base(func(r *keystore.Record) { r.Fence = 1 }), false},
		{"succeeded", base(func(r *keystore.Record) { r.State = keystore.StateSucceeded }), true},
		{"failed", base(func(r *keystore.Record) { r.State = keystore.StateFailed }), true},
		{"manual", base(func(r *keystore.Record) { r.State = keystore.StateManual }), true},
		{"pending, the words in headers and body", base(func(r *keystore.Record) {
			r.Request.Header = tricky
			r.Request.Body = []byte(`"state":"succeeded","owner":"b","lease_until":"2999-01-01T00:00:00Z"`)
			r.Response = &keystore.Response{StatusCode: 201, Header: tricky, Body: []byte(`"state":"succeeded"`)}
		}), false},
		{"succeeded, the words in headers", base(func(r *keystore.Record) {
			r.State = keystore.StateSucceeded
			r.Request.Header = tricky
		}), true},
		{"pending, live lease, other words in headers", base(func(r *keystore.Record) {
			r.Owner, r.LeaseUntil, r.Fence = "a", now.Add(time.Minute), 1
			r.Request.Header = http.Header{"Owner": {""}, "Lease_until": {"2000-01-01T00:00:00Z"}}
		}), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := encode(tc.rec, nil, &codec{})
			if err != nil {
				t.Fatal(err)
			}
			got := surelyNotOrphaned(e.value, now)
			if got != tc.skip {
				t.Errorf("surelyNotOrphaned = %v, want %v; value %s", got, tc.skip, e.value)
			}
			dec, err := (&codec{}).decode(e.key, e.value)
			if err != nil {
				t.Fatal(err)
			}
			if got && keystore.Orphaned(dec, now) {
				t.Errorf("skipped an orphan: %s", e.value)
			}
			// ClaimExpired orders candidates by what candidate reads from the bytes.
			c, ok := candidate(e.key, e.value)
			if !ok || c.Scope != dec.Scope || c.Key != dec.Key || !c.CreatedAt.Equal(dec.CreatedAt) {
				t.Errorf("candidate = %+v, %v; want scope %q key %q created %s", c, ok, dec.Scope, dec.Key, dec.CreatedAt)
			}
		})
	}
	if surelyNotOrphaned([]byte(`{"not":"a record"}`), now) {
		t.Error("a value without a state is decoded, not skipped")
	}
}
