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
	"github.com/idemkit/idem/event"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
)

func pendingPayment(key, ref string, at time.Time) *keystore.Record {
	body, _ := json.Marshal(map[string]any{"amount": 100, "currency": "EUR", "customer": "cus_1", "reference": ref})
	return &keystore.Record{Key: key, Intent: ref, Fingerprint: idem.Fingerprint(http.MethodPost, idemtest.PaymentsPath, body),
		State: keystore.StatePending, CreatedAt: at, UpdatedAt: at,
		Request: keystore.Request{Method: http.MethodPost, URL: idemtest.PaymentsPath,
			Header: http.Header{"Content-Type": {"application/json"}}, Body: body}}
}

// One pending row that does not decode among five orphans: Recover reconciles the five,
// reports the damaged one (typed error, hook) and leaves its bytes as they were; the reclaim
// that claims it with the others does not strand them, and neither does the listing.
func TestRecoverSkipsDamagedRow(t *testing.T) {
	pool := testSchema(t)
	p := pool()
	s := openStore(t, p, nil)
	ctx := context.Background()
	srv := idemtest.NewServer(idemtest.Config{})
	t.Cleanup(srv.Close)
	at := time.Now().Add(-time.Minute)
	for i := range 6 {
		k := fmt.Sprintf("k-%d", i)
		if err := s.Create(ctx, pendingPayment(k, "ref-"+k, at.Add(time.Duration(i)*time.Millisecond))); err != nil {
			t.Fatal(err)
		}
	}
	const garbage = `\x7b6e6f` // `{no`: the request header JSON cut short
	if _, err := p.Exec(ctx, `UPDATE idem_records SET request_header = '`+garbage+`'::bytea WHERE key = 'k-0'`); err != nil {
		t.Fatal(err)
	}
	var events []event.DamagedRecord
	c, err := idem.NewClient(idem.Config{BaseURL: srv.URL, Store: s, KeyStatusURL: idemtest.KeyStatusPathPattern,
		PurgeInterval: -1, Fleet: idem.FleetConfig{Owner: "inst-a"}, Hooks: event.Hooks{OnDamagedRecord: func(e event.DamagedRecord) { events = append(events, e) }}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rep, err := c.Recover(ctx, nil)
	var de *idem.DamagedRecordsError
	if !errors.As(err, &de) || len(de.Records) != 1 || de.Records[0].Key != "k-0" {
		t.Fatalf("Recover error %v; want a *DamagedRecordsError naming k-0", err)
	}
	if rep.Pending != 5 || rep.Succeeded != 5 || len(events) != 1 || events[0].Key != "k-0" {
		t.Fatalf("report %+v, %d damaged events; want 5 pending reconciled and one event for k-0", rep, len(events))
	}
	for i := range 6 {
		k := fmt.Sprintf("k-%d", i)
		want := 1
		if i == 0 {
			want = 0
		}
		if n := srv.ExecutionsByReference("ref-" + k); n != want {
			t.Errorf("%s charged %d times, want %d", k, n, want)
		}
	}
	var header []byte
	if err := p.QueryRow(ctx, `SELECT request_header FROM idem_records WHERE key = 'k-0'`).Scan(&header); err != nil || string(header) != "{no" {
		t.Fatalf("damaged row now holds %q (%v); want it untouched", header, err)
	}
}

// A whole batch of damaged orphans ahead of good ones: one ClaimExpired still returns the
// good ones (another round fills the batch), so a reclaim pass is never stopped by them.
func TestClaimExpiredPastABatchOfDamagedRows(t *testing.T) {
	pool := testSchema(t)
	p := pool()
	s := openStore(t, p, nil)
	ctx := context.Background()
	at := time.Now().Add(-time.Minute)
	for i := range 11 {
		k := fmt.Sprintf("k-%02d", i)
		if err := s.Create(ctx, pendingPayment(k, "ref-"+k, at.Add(time.Duration(i)*time.Millisecond))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Exec(ctx, `UPDATE idem_records SET request_header = '\x7b6e6f'::bytea WHERE key < 'k-08'`); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	recs, err := s.ClaimExpired(ctx, keystore.Lease{Owner: "inst-a", Now: now, Until: now.Add(time.Minute)}, 8)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, r := range recs {
		keys = append(keys, r.Key)
	}
	if fmt.Sprint(keys) != "[k-08 k-09 k-10]" {
		t.Fatalf("claimed %v; want the three good orphans behind the eight damaged ones", keys)
	}
}
