package pgserver_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/pgserver"
)

// offsetClock is the real time plus a settable offset: a server whose clock is off by that
// much from the database's, which reads the real time.
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) Now() time.Time      { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *offsetClock) set(d time.Duration) { c.off.Store(int64(d)) }

// TestClockSkewMiddleware: a server of the fleet whose clock is off past the retention (48 h
// over 24 h) or only slightly, behind the middleware on this backend. Beyond MaxClockSkew, a
// retried completed key is not executed again, a checkpointed row inside its lease is not
// taken over, a fresh key is not claimed (all 503 with Retry-After), the status endpoint
// answers 503 and the purge deletes nothing; once the clock is right, everything is as it
// was. Within MaxClockSkew, nothing changes. With the check off, the same clock executes the
// retry again: the double charge the check prevents.
func TestClockSkewMiddleware(t *testing.T) {
	cases := []struct {
		name    string
		maxSkew time.Duration // Options.MaxClockSkew; 0: the default
		offset  time.Duration
		refused bool // the guard answers

		retry, retryExec      int  // the retry of the completed key: status, executions after it
		replayed              bool // the retry replays the stored answer
		checkpoint, phase2    int  // a request for the checkpointed key: status, phase-2 runs after it
		fresh, status, purged int  // a fresh key's status; the status endpoint's; rows purged
	}{
		{name: "ahead 48h", offset: 48 * time.Hour, refused: true,
			retry: 503, retryExec: 1, checkpoint: 503, phase2: 1, fresh: 503, status: 503, purged: 0},
		{name: "behind 48h", offset: -48 * time.Hour, refused: true,
			retry: 503, retryExec: 1, checkpoint: 503, phase2: 1, fresh: 503, status: 503, purged: 0},
		{name: "ahead 2s, within skew", offset: 2 * time.Second,
			retry: 201, retryExec: 1, replayed: true, checkpoint: 409, phase2: 1, fresh: 201, status: 200, purged: 0},
		{name: "behind 2s, within skew", offset: -2 * time.Second,
			retry: 201, retryExec: 1, replayed: true, checkpoint: 409, phase2: 1, fresh: 201, status: 200, purged: 0},
		{name: "ahead 48h, check off", maxSkew: -1, offset: 48 * time.Hour,
			retry: 201, retryExec: 2, checkpoint: 201, phase2: 2, fresh: 201, status: 200, purged: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pool := testPool(t, 8)
			ctx := context.Background()
			if _, err := pool.Exec(ctx, paymentsSchema); err != nil {
				t.Fatal(err)
			}
			var (
				mu     sync.Mutex
				execs  = map[string]int{} // handler entries per key
				phase2 = 0
				events []idemserver.Event
			)
			clock := &offsetClock{}
			mw, err := idemserver.New(idemserver.Config{
				Backend: pgserver.NewWithOptions(pool, pgserver.Options{MaxClockSkew: tc.maxSkew}),
				Tenant:  bearerTenant, Now: clock.Now, Lease: time.Minute,
				OnEvent: func(ev idemserver.Event) { mu.Lock(); events = append(events, ev); mu.Unlock() },
			})
			if err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			mux.Handle("POST /v1/payments", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				key := r.Header.Get("Idempotency-Key")
				mu.Lock()
				execs[key]++
				n := execs[key]
				mu.Unlock()
				tx, err := pgserver.MustTx(r.Context())
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := tx.Exec(r.Context(), "INSERT INTO payments (reference, idem_key, amount) VALUES ($1, $1, 1)", key); err != nil {
					t.Error(err)
				}
				if key == "k-cp" { // a third-party call after a checkpoint; the first run dies in it
					if idemserver.RecoveryPoint(r) == "" {
						if err := idemserver.Checkpoint(r, "charging"); err != nil {
							t.Errorf("Checkpoint: %v", err)
							return
						}
					}
					mu.Lock()
					phase2++
					first := phase2 == 1
					mu.Unlock()
					if first {
						panic(http.ErrAbortHandler)
					}
				}
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, `{"key":%q,"execution":%d}`, key, n)
			})))
			mux.Handle("GET /v1/payments/operations/{key}", mw.KeyStatusHandler("POST /v1/payments", nil))
			srv := &txServer{Server: httptest.NewServer(mux), pool: pool}
			t.Cleanup(srv.Close)
			count := func(q string) int {
				t.Helper()
				var n int
				if err := pool.QueryRow(ctx, q).Scan(&n); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
				return n
			}

			// With the clock right: k-cp dies after its checkpoint (first, on a new
			// connection: net/http resends a request with an Idempotency-Key that fails on a
			// reused one), k0 and k1 complete.
			if code, _, _ := srv.send(t, "POST", "/v1/payments", "k-cp", "{}"); code != 0 {
				t.Fatalf("k-cp crashed, yet answered %d", code)
			}
			for _, k := range []string{"k0", "k1"} {
				if code, _, body := srv.send(t, "POST", "/v1/payments", k, "{}"); code != 201 || body != fmt.Sprintf(`{"key":%q,"execution":1}`, k) {
					t.Fatalf("%s: %d %s", k, code, body)
				}
			}
			// k0 past its retention on the database's clock too, so that a purge that
			// runs deletes it; k1 stays 24 h.
			if _, err := pool.Exec(ctx, "UPDATE idem_server_keys SET expires_at = clock_timestamp() + interval '1 hour' WHERE key = 'k0'"); err != nil {
				t.Fatal(err)
			}

			clock.set(tc.offset)
			code, h, body := srv.send(t, "POST", "/v1/payments", "k1", "{}")
			if code != tc.retry || (h.Get(idemserver.ReplayedHeader) == "true") != tc.replayed {
				t.Fatalf("retry of k1: %d replayed=%q %s; want %d replayed=%v", code, h.Get(idemserver.ReplayedHeader), body, tc.retry, tc.replayed)
			}
			if tc.refused && (h.Get("Retry-After") != "1" || !strings.Contains(body, idemserver.ProblemUnavailable)) {
				t.Fatalf("refused retry: Retry-After %q, body %s", h.Get("Retry-After"), body)
			}
			if code, _, body := srv.send(t, "POST", "/v1/payments", "k-cp", "{}"); code != tc.checkpoint {
				t.Fatalf("k-cp inside its lease: %d %s; want %d", code, body, tc.checkpoint)
			}
			if code, _, body := srv.send(t, "POST", "/v1/payments", "k2", "{}"); code != tc.fresh {
				t.Fatalf("fresh k2: %d %s; want %d", code, body, tc.fresh)
			}
			if code, _, body := srv.send(t, "GET", "/v1/payments/operations/k1", "", ""); code != tc.status {
				t.Fatalf("status of k1: %d %s; want %d", code, body, tc.status)
			}
			before := count("SELECT count(*) FROM idem_server_keys")
			n, err := mw.Purge(ctx, 10)
			if n != tc.purged || errors.Is(err, pgserver.ErrClockSkew) != tc.refused || (!tc.refused && err != nil) {
				t.Fatalf("Purge = %d, %v; want %d, refused %v", n, err, tc.purged, tc.refused)
			}
			if after := count("SELECT count(*) FROM idem_server_keys"); after != before-tc.purged {
				t.Fatalf("keys after purge %d, before %d; want %d purged", after, before, tc.purged)
			}
			mu.Lock()
			gotExec, gotPhase2 := execs["k1"], phase2
			var skewErrs int
			for _, ev := range events {
				if ev.Kind == idemserver.EventStoreError && errors.Is(ev.Err, pgserver.ErrClockSkew) {
					skewErrs++
				}
			}
			mu.Unlock()
			if gotExec != tc.retryExec || gotPhase2 != tc.phase2 {
				t.Fatalf("k1 executions %d (want %d), k-cp phase-2 runs %d (want %d)", gotExec, tc.retryExec, gotPhase2, tc.phase2)
			}
			wantSkewErrs := 0
			if tc.refused {
				wantSkewErrs = 3 // k1, k-cp, k2
			}
			if st := mw.Stats(); skewErrs != wantSkewErrs || st.StoreErrors != int64(wantSkewErrs) {
				t.Fatalf("clock-skew store errors %d, Stats.StoreErrors %d; want %d", skewErrs, st.StoreErrors, wantSkewErrs)
			}
			if !tc.refused {
				return
			}
			// Refused means untouched: k1 still replays its first answer, k2 was never
			// claimed, and nothing of the refused requests was written.
			if got := count("SELECT count(*) FROM idem_server_keys WHERE key = 'k2'"); got != 0 {
				t.Fatalf("k2 rows after a refused claim = %d", got)
			}
			if got := count("SELECT count(*) FROM payments"); got != 3 { // k0, k1, k-cp's phase 1
				t.Fatalf("payments = %d, want 3", got)
			}
			clock.set(0)
			if code, h, body := srv.send(t, "POST", "/v1/payments", "k1", "{}"); code != 201 ||
				h.Get(idemserver.ReplayedHeader) != "true" || body != `{"key":"k1","execution":1}` {
				t.Fatalf("k1 with the clock right again: %d %v %s", code, h, body)
			}
			if code, _, body := srv.send(t, "POST", "/v1/payments", "k2", "{}"); code != 201 || body != `{"key":"k2","execution":1}` {
				t.Fatalf("k2 with the clock right again: %d %s", code, body)
			}
			if n, err := mw.Purge(ctx, 10); n != 0 || err != nil { // k0 expires in an hour
				t.Fatalf("Purge with the clock right = %d, %v", n, err)
			}
		})
	}
}

// TestClockSkewBackend: Claim, Lookup and Purge each refuse with a *ClockSkewError naming the
// operation, both clocks and the skew, beyond MaxClockSkew in either direction, and go ahead
// within it or with the check off; a refused claim leaves the key free.
func TestClockSkewBackend(t *testing.T) {
	pool := testPool(t, 4)
	ctx := context.Background()
	cases := []struct {
		name    string
		maxSkew time.Duration
		offset  time.Duration
		refused bool
	}{
		{"default, ahead 48h", 0, 48 * time.Hour, true},
		{"default, behind 48h", 0, -48 * time.Hour, true},
		{"default, ahead 10s", 0, 10 * time.Second, true},
		{"default, ahead 2s", 0, 2 * time.Second, false},
		{"default, behind 2s", 0, -2 * time.Second, false},
		{"1 min, ahead 30s", time.Minute, 30 * time.Second, false},
		{"1 min, behind 90s", time.Minute, -90 * time.Second, true},
		{"off, ahead 48h", -1, 48 * time.Hour, false},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := pgserver.NewWithOptions(pool, pgserver.Options{MaxClockSkew: tc.maxSkew})
			wantMax := tc.maxSkew
			if wantMax == 0 {
				wantMax = pgserver.DefaultMaxClockSkew
			}
			check := func(op string, err error) {
				t.Helper()
				if !tc.refused {
					if err != nil {
						t.Fatalf("%s: %v", op, err)
					}
					return
				}
				var ce *pgserver.ClockSkewError
				if !errors.As(err, &ce) || !errors.Is(err, pgserver.ErrClockSkew) {
					t.Fatalf("%s: %v; want a *ClockSkewError", op, err)
				}
				dir := "ahead of"
				if tc.offset < 0 {
					dir = "behind"
				}
				if ce.Op != op || ce.Max != wantMax || (ce.Skew-tc.offset).Abs() > time.Second ||
					(ce.Local.Sub(ce.Database)-ce.Skew).Abs() > time.Millisecond || !strings.Contains(err.Error(), dir) {
					t.Fatalf("%s: %+v (%v); want op %s, skew ~%s, max %s", op, ce, err, op, tc.offset, wantMax)
				}
			}
			s := idemserver.Scope{Tenant: "acct_1", Operation: "POST /v1/payments", Key: fmt.Sprintf("k%d", i)}
			c, rec, err := b.Claim(ctx, idemserver.ClaimRequest{Scope: s, Fingerprint: []byte("fp"), Now: time.Now().Add(tc.offset), Lease: time.Minute})
			check("claim", err)
			if (c != nil) == tc.refused || rec != nil {
				t.Fatalf("Claim = %v, %+v; want a claim %v", c, rec, !tc.refused)
			}
			if c != nil {
				if err := c.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			_, err = b.Lookup(ctx, s, time.Now().Add(tc.offset))
			check("lookup", err)
			n, err := b.Purge(ctx, time.Now().Add(tc.offset), 10)
			check("purge", err)
			if n != 0 {
				t.Fatalf("Purge deleted %d", n)
			}
			// The key is free: a claim with the right clock takes it.
			c, rec, err = pgserver.New(pool).Claim(ctx, idemserver.ClaimRequest{Scope: s, Fingerprint: []byte("fp"), Now: time.Now(), Lease: time.Minute})
			if err != nil || c == nil || rec != nil || c.ExpiredReuse() || c.RecoveryPoint() != "" {
				t.Fatalf("claim with the right clock = %v, %+v, %v", c, rec, err)
			}
			if err := c.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
