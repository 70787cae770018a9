package idem

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
)

// Recover uses the pacer: while a Do is in flight it asks to wait, in total, what starting
// its records at RecoverBusyRate takes (less the millisecond of credit a pass starts with);
// with no call in flight it never waits. The pacer's clock is a fake one that its waits move,
// so the test sleeps nothing. Every orphan is settled by one status check and none is resent.
func TestRecoverPacedWhileCallsRun(t *testing.T) {
	const orphans = 40
	const rate = 1000 // records a second while busy: a start every millisecond
	for _, tc := range []struct {
		name      string
		callIn    bool
		wantSlept time.Duration
	}{
		{"a Do in flight", true, (orphans - 1) * time.Second / rate},
		{"no call in flight", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var checks, sends atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodGet {
					sends.Add(1)
					w.WriteHeader(http.StatusInternalServerError)
					return
				}
				checks.Add(1)
				w.Header().Set("Content-Type", "application/json")
				_, _ = fmt.Fprint(w, `{"status":"completed","response_status":201,"response_body":{"id":"pay_1"}}`)
			}))
			defer srv.Close()

			store := keystore.NewMemory()
			ctx := context.Background()
			created := time.Now().Add(-2 * time.Hour)
			for i := range orphans {
				at := created.Add(time.Duration(i) * time.Millisecond)
				require.NoError(t, store.Create(ctx, &keystore.Record{
					Key: fmt.Sprintf("key-%02d", i), Fingerprint: Fingerprint(http.MethodPost, "/v1/payments", []byte(`{}`)),
					State: keystore.StatePending, Attempts: 1,
					Request:   keystore.Request{Method: http.MethodPost, URL: "/v1/payments", Body: []byte(`{}`)},
					CreatedAt: at, UpdatedAt: at, Owner: "dead", LeaseUntil: at.Add(time.Minute), Fence: 1,
				}))
			}
			c, err := NewClient(Config{BaseURL: srv.URL, Store: store, KeyStatusURL: "/ops/{key}",
				RecoverBusyRate: rate, PurgeInterval: -1})
			require.NoError(t, err)
			defer func() { require.NoError(t, c.Close()) }()

			var clock time.Time = time.Unix(1_000_000, 0)
			var slept time.Duration
			waits := 0
			c.pacerHook = func(p *pacer) {
				p.now = func() time.Time { return clock }
				p.sleep = func(_ context.Context, d time.Duration) {
					clock = clock.Add(d)
					slept += d
					waits++
				}
			}
			if tc.callIn {
				c.enter() // a Do in flight
				defer c.exit()
			}
			report, err := c.Recover(ctx, nil)
			require.NoError(t, err)
			assert.Equal(t, orphans, report.Succeeded)
			assert.EqualValues(t, orphans, checks.Load(), "one status check per orphan")
			assert.Zero(t, sends.Load(), "a settled orphan is never resent")
			// The pass starts with a millisecond of credit and waits only whole debts of at
			// least a millisecond, so it sleeps between (n-1)/rate - 1ms and (n-1)/rate.
			assert.LessOrEqual(t, slept, tc.wantSlept)
			assert.GreaterOrEqual(t, slept, max(tc.wantSlept-time.Millisecond, 0))
			if !tc.callIn {
				assert.Zero(t, waits)
			}
		})
	}
}
