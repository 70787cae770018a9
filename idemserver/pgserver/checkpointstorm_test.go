package pgserver_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/pgserver"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestCheckpointStorm: a two-phase handler (the payment, Checkpoint, then the outbox row)
// that panics after its checkpoint on each key's first run and a third of the time after
// that (the first run's panic makes every run cover a takeover), under 6 concurrent clients per key
// over three servers with a 150 ms lease. Phase one must run once per key (takeovers resume
// at the recovery point), phase two must commit once, and every 201 must be the same.
func TestCheckpointStorm(t *testing.T) {
	base := testPool(t, 4)
	ctx := context.Background()
	if _, err := base.Exec(ctx, paymentsSchema); err != nil {
		t.Fatal(err)
	}
	var resumed, panicked atomic.Int32
	var firstRun sync.Map // keys whose phase one has run
	h := func(w http.ResponseWriter, r *http.Request) {
		tx, err := pgserver.MustTx(r.Context())
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		scope, _ := idemserver.KeyScope(r)
		var id int64
		first := false
		if idemserver.RecoveryPoint(r) == "" {
			if err := tx.QueryRow(r.Context(), "INSERT INTO payments (reference, idem_key, amount) VALUES ('r', $1, 1) RETURNING id", scope.Key).Scan(&id); err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			if err := idemserver.Checkpoint(r, "charged"); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			if tx, err = pgserver.MustTx(r.Context()); err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			_, ran := firstRun.LoadOrStore(scope.Key, true)
			first = !ran
		} else if resumed.Add(1); false {
		} else if err := tx.QueryRow(r.Context(), "SELECT id FROM payments WHERE idem_key = $1", scope.Key).Scan(&id); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		if first || r.Header.Get("X-Mode") == "panic" {
			panicked.Add(1)
			panic("after the checkpoint")
		}
		if _, err := tx.Exec(r.Context(), "INSERT INTO outbox (payment_id, event) VALUES ($1, 'payment.created')", id); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, id)
	}
	var srvs []*httptest.Server
	for range 3 {
		cfg := base.Config().Copy()
		cfg.MaxConns = 6
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		mw, err := idemserver.New(idemserver.Config{Backend: pgserver.New(pool), Tenant: bearerTenant, Lease: 150 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(mw.Handler(http.HandlerFunc(h)))
		t.Cleanup(srv.Close)
		srvs = append(srvs, srv)
	}
	const keys, clients = 10, 6
	answers := make([][]string, keys)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for k := range keys {
		key := fmt.Sprintf("33333333-3333-4333-8333-%012d", k)
		for c := range clients {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(k), uint64(c)))
				answer := untilFinal(500, func(int) (*http.Response, error) {
					srv := srvs[rng.IntN(len(srvs))]
					req, _ := http.NewRequest("POST", srv.URL+"/v1/payments", strings.NewReader(`{}`))
					req.Header.Set("Authorization", "Bearer acct_cp")
					req.Header.Set("Idempotency-Key", key)
					if rng.IntN(3) == 0 {
						req.Header.Set("X-Mode", "panic")
					}
					return srv.Client().Do(req)
				}, func(status int) {
					if status == 0 {
						time.Sleep(10 * time.Millisecond)
					} else {
						time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
					}
				})
				mu.Lock()
				answers[k] = append(answers[k], answer)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	t.Logf("%d handlers panicked after their checkpoint, %d resumed from it", panicked.Load(), resumed.Load())
	if resumed.Load() == 0 {
		t.Error("no takeover resumed a checkpoint: the run did not cover it")
	}
	for k := range keys {
		key := fmt.Sprintf("33333333-3333-4333-8333-%012d", k)
		var n, outbox int
		var id int64
		if err := base.QueryRow(ctx, `SELECT count(*), max(id), (SELECT count(*) FROM outbox o JOIN payments p ON p.id = o.payment_id WHERE p.idem_key = $1)
			FROM payments WHERE idem_key = $1`, key).Scan(&n, &id, &outbox); err != nil {
			t.Fatal(err)
		}
		if n != 1 || outbox != 1 {
			t.Errorf("%s: %d payments, %d outbox rows; want 1 and 1", key, n, outbox)
		}
		want := fmt.Sprintf(`201 {"id":%d}`, id)
		for _, a := range answers[k] {
			if a != want {
				t.Errorf("%s: answer %s, want %s", key, a, want)
			}
		}
	}
}
