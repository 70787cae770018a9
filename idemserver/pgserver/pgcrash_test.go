package pgserver_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/pgserver"
	"github.com/jackc/pgx/v5/pgxpool"
)

// slowCommitSchema makes a COMMIT that carries an outbox row wait in a deferred trigger while
// slow_commit holds a row: a window after the claim's answer was written (and, in this
// version, its session-level lock dropped) and before the transaction ends.
const slowCommitSchema = `
CREATE TABLE IF NOT EXISTS slow_commit (secs float8 NOT NULL);
CREATE OR REPLACE FUNCTION slow_commit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(coalesce((SELECT max(secs) FROM slow_commit), 0)); RETURN NULL; END $$;
DROP TRIGGER IF EXISTS slow_commit_trg ON outbox;
CREATE CONSTRAINT TRIGGER slow_commit_trg AFTER INSERT ON outbox DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW EXECUTE FUNCTION slow_commit_fn();`

// TestTerminateAtCommit holds a claim's COMMIT in a deferred trigger (the answer written,
// the session-level lock dropped by completeSQL), sends a duplicate from another pool, which
// must get 409 without running the handler, asks the status (processing), then kills the
// claim's backend (pg_terminate_backend) or cancels its COMMIT (pg_cancel_backend). The
// ledger must then hold neither the payment nor an answer, and a retry must run it once.
func TestTerminateAtCommit(t *testing.T) {
	for _, kill := range []string{"pg_terminate_backend", "pg_cancel_backend"} {
		t.Run(kill, func(t *testing.T) {
			base := testPool(t, 4)
			ctx := context.Background()
			if _, err := base.Exec(ctx, paymentsSchema+slowCommitSchema+"INSERT INTO slow_commit VALUES (2)"); err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			pids := make(chan int32, 4)
			h := func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				tx, err := pgserver.MustTx(r.Context())
				if err != nil {
					http.Error(w, err.Error(), 500)
					return
				}
				scope, _ := idemserver.KeyScope(r)
				var id int64
				var pid int32
				if err := tx.QueryRow(r.Context(), "INSERT INTO payments (reference, idem_key, amount) VALUES ('r', $1, 1) RETURNING id, pg_backend_pid()",
					scope.Key).Scan(&id, &pid); err != nil {
					http.Error(w, err.Error(), 500)
					return
				}
				if _, err := tx.Exec(r.Context(), "INSERT INTO outbox (payment_id, event) VALUES ($1, 'payment.created')", id); err != nil {
					http.Error(w, err.Error(), 500)
					return
				}
				pids <- pid
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, `{"id":%d}`, id)
			}
			a, b := advServer(t, base, 2, h), advServer(t, base, 2, h)
			const key = "11111111-1111-4111-8111-111111111111"
			post := func(srv *httptest.Server) (int, string) {
				req, _ := http.NewRequest("POST", srv.URL+"/v1/payments", strings.NewReader(`{"amount":1}`))
				req.Header.Set("Authorization", "Bearer acct_t")
				req.Header.Set("Idempotency-Key", key)
				resp, err := srv.Client().Do(req)
				if err != nil {
					return 0, err.Error()
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(body)
			}
			first := make(chan int, 1)
			go func() { st, _ := post(a); first <- st }()
			pid := <-pids
			// Wait until the claim's backend sleeps in the COMMIT's trigger.
			deadline := time.Now().Add(5 * time.Second)
			for {
				var waiting bool
				if err := base.QueryRow(ctx, "SELECT coalesce(bool_or(wait_event = 'PgSleep'), false) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the claim's COMMIT never reached the trigger")
				}
				time.Sleep(5 * time.Millisecond)
			}
			var locks int
			if err := base.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1 AND granted", pid).Scan(&locks); err != nil {
				t.Fatal(err)
			}
			t.Logf("advisory locks the claim's backend holds inside its COMMIT: %d", locks)
			if st, body := post(b); st != http.StatusConflict {
				t.Errorf("duplicate during the first request's COMMIT: %d %s, want 409", st, body)
			}
			if n := runs.Load(); n != 1 {
				t.Errorf("handler ran %d times during the first request's COMMIT, want 1", n)
			}
			var ok bool
			if err := base.QueryRow(ctx, "SELECT "+kill+"($1)", pid).Scan(&ok); err != nil || !ok {
				t.Fatalf("%s: %v %v", kill, ok, err)
			}
			st := <-first
			var payments, answers int
			if err := base.QueryRow(ctx, "SELECT (SELECT count(*) FROM payments), (SELECT count(*) FROM idem_server_keys WHERE state = 2)").Scan(&payments, &answers); err != nil {
				t.Fatal(err)
			}
			if payments != answers || payments > 1 {
				t.Fatalf("after %s at COMMIT (first answered %d): %d payments, %d stored answers; want both 0 or both 1", kill, st, payments, answers)
			}
			if _, err := base.Exec(ctx, "DELETE FROM slow_commit"); err != nil {
				t.Fatal(err)
			}
			for i := 0; ; i++ {
				st, body := post(b)
				if st == http.StatusCreated {
					break
				}
				if i == 50 {
					t.Fatalf("retry: %d %s", st, body)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := base.QueryRow(ctx, "SELECT count(*) FROM payments").Scan(&payments); err != nil {
				t.Fatal(err)
			}
			if payments != 1 {
				t.Errorf("%d payments after the retry, want 1", payments)
			}
		})
	}
}

var _ = pgxpool.Pool{}

// TestPostgresRestart drives 200 payments (each sent by two concurrent clients over two
// servers) while PostgreSQL is crashed and restarted (IDEM_TEST_PG_RESTART, a shell command
// such as "pg_ctl restart -m immediate") three times, and checks the ledger: one payment per
// key, with its outbox row, every 201 the same. Skipped without the command.
func TestPostgresRestart(t *testing.T) {
	restart := os.Getenv("IDEM_TEST_PG_RESTART")
	if restart == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("IDEM_TEST_PG_RESTART not set: .ci/postgres.sh sets it for the server it starts")
		}
		t.Skip("IDEM_TEST_PG_RESTART not set (a shell command that crash-restarts the server of IDEM_TEST_PG_DSN)")
	}
	base := testPool(t, 4)
	ctx := context.Background()
	if _, err := base.Exec(ctx, paymentsSchema); err != nil {
		t.Fatal(err)
	}
	srvs := []*httptest.Server{advServer(t, base, 8, advPay), advServer(t, base, 8, advPay)}
	const n = 200
	answers := make([][]string, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	var retried atomic.Int64
	for i := range n {
		key := fmt.Sprintf("22222222-2222-4222-8222-%012d", i)
		for c := range 2 {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				body := fmt.Sprintf(`{"reference":%q,"amount":%d}`, key, 100+i)
				answer := untilFinal(2000, func(try int) (*http.Response, error) {
					srv := srvs[(try+c)%2]
					req, _ := http.NewRequest("POST", srv.URL+"/v1/payments", strings.NewReader(body))
					req.Header.Set("Authorization", "Bearer acct_restart")
					req.Header.Set("Idempotency-Key", key)
					return srv.Client().Do(req)
				}, func(int) {
					retried.Add(1)
					time.Sleep(10 * time.Millisecond)
				})
				mu.Lock()
				answers[i] = append(answers[i], answer)
				mu.Unlock()
			})
		}
	}
	for range 3 {
		time.Sleep(700 * time.Millisecond)
		out, err := exec.Command("sh", "-c", restart).CombinedOutput()
		if err != nil {
			t.Fatalf("restart: %v %s", err, out)
		}
	}
	wg.Wait()
	t.Logf("%d attempts answered 409/503 or failed", retried.Load())
	for i := range n {
		key := fmt.Sprintf("22222222-2222-4222-8222-%012d", i)
		var ids []int64
		var outbox int
		rows, err := base.Query(ctx, "SELECT p.id, (SELECT count(*) FROM outbox o WHERE o.payment_id = p.id) FROM payments p WHERE idem_key = $1", key)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id, &outbox); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		if len(ids) != 1 || outbox != 1 {
			t.Errorf("%s: payments %v (last with %d outbox rows), want exactly one with one", key, ids, outbox)
			continue
		}
		want := fmt.Sprintf(`201 {"id":%d,"reference":%q,"amount":%d}`, ids[0], key, 100+i)
		for _, a := range answers[i] {
			if a != want {
				t.Errorf("%s: answer %s, want %s", key, a, want)
			}
		}
	}
}
