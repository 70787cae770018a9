package servertest

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
)

var (
	fpA = bytes.Repeat([]byte{0xa}, 32)
	fpB = bytes.Repeat([]byte{0xb}, 32)
)

func scope(key string) idemserver.Scope {
	return idemserver.Scope{Tenant: "acct_1", Operation: "POST /v1/payments", Key: key}
}

func claim(t *testing.T, b idemserver.Backend, s idemserver.Scope, fp []byte, now time.Time) (idemserver.Claim, *idemserver.Record) {
	t.Helper()
	c, rec, err := b.Claim(context.Background(), idemserver.ClaimRequest{Scope: s, Fingerprint: fp, Now: now, Lease: time.Minute})
	if err != nil {
		t.Fatalf("Claim(%v): %v", s, err)
	}
	if (c == nil) == (rec == nil) {
		t.Fatalf("Claim(%v) = (%v, %v): want exactly one of claim and record", s, c, rec)
	}
	return c, rec
}

func lookup(t *testing.T, b idemserver.Backend, s idemserver.Scope, now time.Time) *idemserver.Record {
	t.Helper()
	rec, err := b.Lookup(context.Background(), s, now)
	if err != nil {
		t.Fatalf("Lookup(%v): %v", s, err)
	}
	return rec
}

func testClaimRules(t *testing.T, b idemserver.Backend) {
	ctx := context.Background()
	now := NewClock().Now()
	s := scope("k1")
	if rec := lookup(t, b, s, now); rec != nil {
		t.Fatalf("Lookup before claim = %+v, want nil", rec)
	}
	c, _ := claim(t, b, s, fpA, now)
	if c.RecoveryPoint() != "" || c.ExpiredReuse() {
		t.Fatalf("fresh claim: RecoveryPoint %q ExpiredReuse %v", c.RecoveryPoint(), c.ExpiredReuse())
	}
	if rec := lookup(t, b, s, now); rec == nil || rec.State != idemserver.StateProcessing {
		t.Fatalf("Lookup while claimed = %+v, want processing", rec)
	}
	if _, rec := claim(t, b, s, fpB, now); rec.State != idemserver.StateProcessing {
		t.Fatalf("claim with fpB while claimed: %+v, want processing", rec)
	}
	// A second claim, same and other fingerprint, while the first holds the key.
	_, rec := claim(t, b, s, fpA, now)
	if rec.State != idemserver.StateProcessing || rec.Fingerprint != nil && !bytes.Equal(rec.Fingerprint, fpA) {
		t.Fatalf("second claim: record %+v, want processing with fpA or nil", rec)
	}
	resp := &idemserver.Response{StatusCode: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"ch_1"}`)}
	if err := c.Complete(ctx, resp, now, now.Add(time.Hour)); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if err := c.Complete(ctx, resp, now, now.Add(time.Hour)); !errors.Is(err, idemserver.ErrNotOwner) {
		t.Fatalf("second Complete = %v, want ErrNotOwner", err)
	}
	_, rec = claim(t, b, s, fpA, now.Add(time.Minute))
	if rec.State != idemserver.StateCompleted || rec.Response == nil || rec.Response.StatusCode != 201 ||
		string(rec.Response.Body) != `{"id":"ch_1"}` || rec.Response.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("claim after complete: %+v", rec)
	}
	_, rec = claim(t, b, s, fpB, now)
	if !bytes.Equal(rec.Fingerprint, fpA) {
		t.Fatalf("claim with fpB: record fingerprint %x, want fpA", rec.Fingerprint)
	}
	if rec := lookup(t, b, s, now); rec == nil || rec.State != idemserver.StateCompleted || rec.Response.StatusCode != 201 {
		t.Fatalf("Lookup after complete = %+v", rec)
	}
}

func testRelease(t *testing.T, b idemserver.Backend) {
	ctx := context.Background()
	now := NewClock().Now()
	s := scope("k-release")
	c, _ := claim(t, b, s, fpA, now)
	if err := c.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if rec := lookup(t, b, s, now); rec != nil {
		t.Fatalf("Lookup after release = %+v, want nil", rec)
	}
	// A corrected request (another fingerprint) may claim the released key.
	c2, _ := claim(t, b, s, fpB, now)
	if err := c2.Complete(ctx, &idemserver.Response{StatusCode: 200, Header: http.Header{}, Body: []byte("ok")}, now, now.Add(time.Hour)); err != nil {
		t.Fatalf("Complete after release: %v", err)
	}
	if err := c.Release(ctx); !errors.Is(err, idemserver.ErrNotOwner) {
		t.Fatalf("stale Release = %v, want ErrNotOwner", err)
	}
}

func testCheckpointTakeover(t *testing.T, b idemserver.Backend) {
	ctx := context.Background()
	now := NewClock().Now()
	s := scope("k-cp")
	c, _ := claim(t, b, s, fpA, now)
	if err := c.Checkpoint(ctx, "charge_created", now, time.Minute); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if err := c.Release(ctx); err != nil { // the owner gives up (or crashes) after the checkpoint
		t.Fatalf("Release: %v", err)
	}
	rec := lookup(t, b, s, now)
	if rec == nil || rec.State != idemserver.StateProcessing || rec.RecoveryPoint != "charge_created" {
		t.Fatalf("Lookup after checkpoint+release = %+v, want processing at charge_created", rec)
	}
	// Inside the lease: still in progress.
	if _, rec := claim(t, b, s, fpA, now.Add(30*time.Second)); rec.State != idemserver.StateProcessing {
		t.Fatalf("claim inside lease: %+v", rec)
	}
	// Another request body never takes it over.
	if _, rec := claim(t, b, s, fpB, now.Add(2*time.Minute)); !bytes.Equal(rec.Fingerprint, fpA) {
		t.Fatalf("claim with fpB after lease: %+v", rec)
	}
	resumed := now.Add(2 * time.Minute)
	c2, _ := claim(t, b, s, fpA, resumed)
	if c2.RecoveryPoint() != "charge_created" {
		_ = c2.Release(ctx)
		t.Fatalf("takeover RecoveryPoint = %q, want charge_created", c2.RecoveryPoint())
	}
	// The resumed owner gives up (or crashes) too, maybe with its third-party call still
	// settling: the takeover's lease holds the key as the checkpoint's did, not the first
	// owner's, long past.
	if err := c2.Release(ctx); err != nil {
		t.Fatalf("Release after takeover: %v", err)
	}
	rec = lookup(t, b, s, resumed)
	if rec == nil || rec.State != idemserver.StateProcessing || rec.RecoveryPoint != "charge_created" || !rec.LockedUntil.Equal(resumed.Add(time.Minute)) {
		t.Fatalf("Lookup after takeover+release = %+v, want processing at charge_created, locked until %v", rec, resumed.Add(time.Minute))
	}
	if c, rec := claim(t, b, s, fpA, resumed.Add(30*time.Second)); c != nil {
		_ = c.Release(ctx)
		t.Fatal("claim inside the takeover's lease took the key over again, want it in progress")
	} else if rec.State != idemserver.StateProcessing {
		t.Fatalf("claim inside the takeover's lease: %+v", rec)
	}
	c3, _ := claim(t, b, s, fpA, resumed.Add(time.Minute))
	defer func() { _ = c3.Release(ctx) }() // ErrNotOwner once completed
	if c3.RecoveryPoint() != "charge_created" {
		t.Fatalf("second takeover RecoveryPoint = %q, want charge_created", c3.RecoveryPoint())
	}
	if err := c3.Complete(ctx, &idemserver.Response{StatusCode: 201, Header: http.Header{}, Body: []byte(`{}`)}, now, now.Add(time.Hour)); err != nil {
		t.Fatalf("Complete after takeover: %v", err)
	}
	if rec := lookup(t, b, s, now); rec == nil || rec.State != idemserver.StateCompleted {
		t.Fatalf("Lookup after takeover complete = %+v", rec)
	}
}

func testExpiryAndPurge(t *testing.T, b idemserver.Backend) {
	ctx := context.Background()
	now := NewClock().Now()
	for i, k := range []string{"e1", "e2", "e3", "e4", "e5"} {
		c, _ := claim(t, b, scope(k), fpA, now)
		if err := c.Complete(ctx, &idemserver.Response{StatusCode: 201, Header: http.Header{}, Body: []byte(k)}, now, now.Add(time.Duration(i+1)*time.Hour)); err != nil {
			t.Fatalf("Complete %s: %v", k, err)
		}
	}
	live, _ := claim(t, b, scope("live"), fpA, now) // processing: never purged
	defer live.Release(ctx)
	at := now.Add(5 * time.Hour) // e1..e5 expired
	if rec := lookup(t, b, scope("e5"), at); rec != nil {
		t.Fatalf("Lookup of expired e5 = %+v, want nil", rec)
	}
	if rec := lookup(t, b, scope("e5"), at.Add(-time.Nanosecond)); rec == nil {
		t.Fatal("Lookup of e5 just before expiry = nil")
	}
	c, _ := claim(t, b, scope("e1"), fpB, at) // expired: another body may reuse the key
	if !c.ExpiredReuse() {
		t.Fatal("claim of expired e1: ExpiredReuse false")
	}
	if err := c.Complete(ctx, &idemserver.Response{StatusCode: 201, Header: http.Header{}, Body: []byte("new")}, at, at.Add(time.Hour)); err != nil {
		t.Fatalf("Complete e1 again: %v", err)
	}
	for i, want := range []int{2, 2, 0} { // e2..e5 are due, e1 is live again
		n, err := b.Purge(ctx, at, 2)
		if err != nil || n != want {
			t.Fatalf("Purge #%d = %d, %v; want %d", i, n, err, want)
		}
	}
	if rec := lookup(t, b, scope("e1"), at); rec == nil || string(rec.Response.Body) != "new" {
		t.Fatalf("e1 after purge = %+v", rec)
	}
	if rec := lookup(t, b, scope("live"), at); rec == nil || rec.State != idemserver.StateProcessing {
		t.Fatalf("processing key after purge = %+v", rec)
	}
}

func testScopeIsolation(t *testing.T, b idemserver.Backend) {
	ctx := context.Background()
	now := NewClock().Now()
	base := scope("same-key")
	others := []idemserver.Scope{base, {Tenant: "acct_2", Operation: base.Operation, Key: base.Key},
		{Tenant: base.Tenant, Operation: "POST /v1/refunds", Key: base.Key}}
	for i, s := range others {
		c, _ := claim(t, b, s, fpA, now)
		if err := c.Complete(ctx, &idemserver.Response{StatusCode: 201, Header: http.Header{}, Body: []byte{byte('0' + i)}}, now, now.Add(time.Hour)); err != nil {
			t.Fatalf("Complete %v: %v", s, err)
		}
	}
	for i, s := range others {
		if rec := lookup(t, b, s, now); rec == nil || string(rec.Response.Body) != string([]byte{byte('0' + i)}) {
			t.Fatalf("Lookup %v = %+v", s, rec)
		}
	}
}
