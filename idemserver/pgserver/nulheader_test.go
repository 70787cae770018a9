package pgserver_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/pgserver"
)

// An answer whose header holds a NUL byte (a Location echoing a client's reference) could
// never be stored: jsonb refuses \u0000, Complete failed every time, and every retry ran the
// handler again for a 503 "retry" (adversarial run). It is stored, and read back byte for
// byte, as NewMemory stores it.
func TestAnswerHeaderWithNULIsStored(t *testing.T) {
	pool := testPool(t, 2)
	b := pgserver.NewWithOptions(pool, pgserver.Options{MaxClockSkew: -1})
	ctx := context.Background()
	now := time.Now()
	s := idemserver.Scope{Tenant: "acct_1", Operation: "POST /v1/payments", Key: "k-nul"}
	c, rec, err := b.Claim(ctx, idemserver.ClaimRequest{Scope: s, Fingerprint: []byte("fp"), Now: now, Lease: time.Minute})
	if err != nil || c == nil || rec != nil {
		t.Fatalf("Claim = %v, %+v, %v", c, rec, err)
	}
	const location = "/v1/payments/ref\x00x"
	resp := &idemserver.Response{StatusCode: 201, Header: http.Header{"Location": {location}}, Body: []byte(`{"id":1}`)}
	if err := c.Complete(ctx, resp, now, now.Add(time.Hour)); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	got, err := b.Lookup(ctx, s, now)
	if err != nil || got == nil || got.Response == nil {
		t.Fatalf("Lookup = %+v, %v", got, err)
	}
	if l := got.Response.Header.Get("Location"); l != location || got.Response.StatusCode != 201 {
		t.Fatalf("stored %d, Location %q, want 201 %q", got.Response.StatusCode, l, location)
	}
}
