package pgserver_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/idemserver/pgserver"
	"github.com/jackc/pgx/v5/pgxpool"
)

// These two tests hold the claim's design: the key's processing row is inserted by the claim
// statement, in the claim's transaction. A fresh key's row written only with the answer was
// tried (docs/PERFORMANCE.md section i) and failed both.

// TestHandlerCommitThenLostConnection: a handler that COMMITs the claim's transaction itself
// (its payment with it) and then loses the claim's connection while it still runs (a slow
// third-party call). The COMMIT also committed the key's processing row and its lease, so a
// retry meanwhile gets 409, not a second run of the handler.
func TestHandlerCommitThenLostConnection(t *testing.T) {
	var runs atomic.Int32
	ended, retried := make(chan struct{}), make(chan struct{})
	var s *txServer
	s = newTxServer(t, func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		tx, err := pgserver.MustTx(r.Context())
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := tx.Exec(r.Context(), "INSERT INTO payments (reference, idem_key, amount) VALUES ('r-ended', 'k', 1)"); err != nil {
			t.Error(err)
		}
		if n > 1 {
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"id":"pay_again"}`)
			return
		}
		if _, err := tx.Exec(r.Context(), "COMMIT"); err != nil {
			t.Error(err)
		}
		var gone bool // the claim's connection is lost; wait for its backend to exit
		if err := s.pool.QueryRow(r.Context(), "SELECT pg_terminate_backend($1, 10000)", tx.Conn().PgConn().PID()).Scan(&gone); err != nil || !gone {
			t.Errorf("terminate: %v, gone %v", err, gone)
		}
		close(ended)
		<-retried // the handler is still running when the retry comes
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"pay_1"}`)
	})
	first := make(chan int, 1)
	go func() {
		code, _, _ := s.send(t, "POST", "/v1/payments", "k-ended-lost", "{}")
		first <- code
	}()
	<-ended
	code, _, body := s.send(t, "POST", "/v1/payments", "k-ended-lost", "{}")
	close(retried)
	<-first
	if code != http.StatusConflict {
		t.Errorf("retry while the first handler still runs: %d %s, want 409", code, body)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
	if n := s.count(t, "SELECT count(*) FROM payments WHERE reference = 'r-ended'"); n != 1 {
		t.Errorf("%d payments, want 1", n)
	}
}

// TestUnrelatedCommitsDoNotRefuseAFreshKey: under repeatable read and serializable, eight
// clients commit into an unrelated table while fresh keys are sent one after another. Every
// key is free, so every one executes (201): a claim must not read other keys' commits as
// a sign that its own key is taken.
func TestUnrelatedCommitsDoNotRefuseAFreshKey(t *testing.T) {
	const keys = 60
	for _, iso := range []string{"repeatable read", "serializable"} {
		t.Run(strings.ReplaceAll(iso, " ", "_"), func(t *testing.T) {
			s := newTxServerWith(t, func(c *pgxpool.Config) {
				c.ConnConfig.RuntimeParams["default_transaction_isolation"] = iso
			}, func(w http.ResponseWriter, r *http.Request) {
				tx, err := pgserver.MustTx(r.Context())
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := tx.Exec(r.Context(), "INSERT INTO payments (reference, idem_key, amount) VALUES ($1, $1, 1)", r.Header.Get("Idempotency-Key")); err != nil {
					t.Error(err)
				}
				w.WriteHeader(http.StatusCreated)
			})
			ctx := context.Background()
			burn := testPool(t, 8)
			if _, err := burn.Exec(ctx, "CREATE TABLE unrelated (n int)"); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
							_, _ = burn.Exec(ctx, "INSERT INTO unrelated VALUES (1)")
						}
					}
				})
			}
			codes := map[int]int{}
			for i := range keys {
				code, _, _ := s.send(t, http.MethodPost, "/v1/payments", fmt.Sprintf("k-busy-%d", i), "{}")
				codes[code]++
			}
			close(stop)
			wg.Wait()
			if codes[http.StatusCreated] != keys {
				t.Errorf("%d fresh keys: %v, want all 201", keys, codes)
			}
			if n := s.count(t, "SELECT count(*) FROM payments"); n != keys {
				t.Errorf("%d payments, want %d", n, keys)
			}
		})
	}
}
