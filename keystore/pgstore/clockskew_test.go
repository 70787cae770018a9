package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

// Now is the database's clock: close to this host's (same machine), ErrClosed after Close.
func TestNowIsDatabaseClock(t *testing.T) {
	s := openStore(t, testSchema(t)(), nil)
	ctx := context.Background()
	before := time.Now()
	now, err := s.Now(ctx)
	after := time.Now()
	if err != nil {
		t.Fatalf("Now: %v", err)
	}
	if now.Before(before.Add(-time.Second)) || now.After(after.Add(time.Second)) {
		t.Errorf("database clock %v outside [%v, %v] ± 1s", now, before, after)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Now(ctx); !errors.Is(err, keystore.ErrClosed) {
		t.Errorf("Now after Close: %v, want ErrClosed", err)
	}
}

// The tester's double charge, on PostgreSQL: instance A pays three intents; instance B, its
// clock 80 h ahead (past Retention), runs Recover. B gets ErrClockSkew and purges nothing, so
// A's second Do of each intent answers from the stored record: each payment charged once.
func TestClientClockAheadRecoverPurgesNothing(t *testing.T) {
	pool := testSchema(t)
	sa, sb := openStore(t, pool(), nil), openStore(t, pool(), nil)
	srv := idemtest.NewServer(idemtest.Config{})
	t.Cleanup(srv.Close)
	newClient := func(store keystore.Store, owner string, now func() time.Time) *idem.Client {
		c, err := idem.NewClient(idem.Config{BaseURL: srv.URL, Store: store, KeyStatusURL: idemtest.KeyStatusPathPattern,
			Fleet: idem.FleetConfig{Owner: owner}, Now: now, PurgeInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a := newClient(sa, "instance-a", nil)
	b := newClient(sb, "instance-b", func() time.Time { return time.Now().Add(80 * time.Hour) })
	ctx := context.Background()
	pay := func(ref string) *idem.Operation {
		body, _ := json.Marshal(map[string]any{"amount": 1250, "currency": "EUR", "customer": "cus_1", "reference": ref})
		return idem.NewOperation(http.MethodPost, idemtest.PaymentsPath, body, idem.WithIntent(ref))
	}
	keys := map[string]string{}
	for i := range 3 {
		ref := fmt.Sprintf("order-%d", i)
		res, err := a.Do(ctx, pay(ref))
		if err != nil {
			t.Fatalf("first Do %s: %v", ref, err)
		}
		keys[ref] = res.Key
	}

	rep, err := b.Recover(ctx, nil)
	var ce *idem.ClockSkewError
	if !errors.Is(err, idem.ErrClockSkew) || !errors.As(err, &ce) {
		t.Fatalf("Recover with the clock 80h ahead: %v, want ErrClockSkew", err)
	}
	if ce.Skew < 80*time.Hour-time.Minute || ce.Skew > 80*time.Hour+time.Minute || ce.Op != "retention purge" {
		t.Errorf("ClockSkewError %+v, want a retention purge refused at a skew of about 80h", ce)
	}
	if rep != (idem.RecoverReport{}) {
		t.Errorf("report %+v, want nothing done", rep)
	}
	if n := b.Stats().ClockSkewRefusals; n != 1 {
		t.Errorf("ClockSkewRefusals = %d, want 1", n)
	}
	for ref, key := range keys {
		rec, err := sa.GetByIntent(ctx, "", ref)
		if err != nil || rec.Key != key || rec.State != keystore.StateSucceeded {
			t.Fatalf("intent %s after the skewed Recover: %+v, %v; want succeeded under %s", ref, rec, err, key)
		}
	}
	for ref, key := range keys {
		res, err := a.Do(ctx, pay(ref))
		if err != nil {
			t.Fatalf("second Do %s: %v", ref, err)
		}
		if res.Key != key || res.Source != outcome.SourceStore {
			t.Errorf("second Do %s: key %s source %s, want the stored answer under %s", ref, res.Key, res.Source, key)
		}
		if n := srv.ExecutionsByReference(ref); n != 1 {
			t.Errorf("%s charged %d times, want 1", ref, n)
		}
	}
	if n := srv.Stats().Requests; n != 3 {
		t.Errorf("server saw %d requests, want 3", n)
	}
}
