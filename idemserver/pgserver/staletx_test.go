package pgserver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/pgserver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// staleServer serves handlers (POST /{path}) under a middleware on a pool of one connection,
// so that each claim gets the connection of the one before; post returns the status.
func staleServer(t *testing.T, handlers map[string]http.Handler) (*pgxpool.Pool, func(path, key string) int) {
	t.Helper()
	pool := testPool(t, 1)
	if _, err := pool.Exec(context.Background(), paymentsSchema); err != nil {
		t.Fatal(err)
	}
	mw, err := idemserver.New(idemserver.Config{Backend: pgserver.New(pool), Tenant: bearerTenant})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for path, h := range handlers {
		mux.Handle("POST /"+path, mw.Handler(h))
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	post := func(path, key string) int { // 0: the connection was dropped (a panic)
		req, _ := http.NewRequest("POST", srv.URL+"/"+path, strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer acct_1")
		req.Header.Set("Idempotency-Key", key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	return pool, post
}

// staleOID is the large object a stale Tx tries to create.
const staleOID = 4242421

// staleCalls tries each of tx's methods, every one a write that would stay in the
// transaction it ran in.
func staleCalls(ctx context.Context, tx pgx.Tx) map[string]error {
	const ins = "INSERT INTO payments (reference, idem_key, amount) VALUES ('stale', 'kA', 999)"
	errs := map[string]error{}
	_, errs["Exec"] = tx.Exec(ctx, ins)
	rows, err := tx.Query(ctx, ins+" RETURNING id")
	errs["Query"] = err
	if rows.Next() {
		errs["Rows.Next"] = errors.New("a row")
	} else {
		errs["Rows.Next"] = rows.Err()
	}
	rows.Close()
	errs["QueryRow"] = tx.QueryRow(ctx, ins+" RETURNING id").Scan(new(int64))
	b := &pgx.Batch{}
	b.Queue(ins)
	errs["SendBatch"] = tx.SendBatch(ctx, b).Close()
	_, errs["CopyFrom"] = tx.CopyFrom(ctx, pgx.Identifier{"payments"}, []string{"reference", "idem_key", "amount"},
		pgx.CopyFromRows([][]any{{"stale", "kA", 999}}))
	_, errs["Prepare"] = tx.Prepare(ctx, "stale", ins)
	_, errs["Begin"] = tx.Begin(ctx)
	lo := tx.LargeObjects()
	_, errs["LargeObjects.Create"] = lo.Create(ctx, staleOID)
	errs["Commit"] = tx.Commit(ctx)
	errs["Rollback"] = tx.Rollback(ctx)
	if tx.Conn() != nil {
		errs["Conn"] = errors.New("the connection, which now serves another claim")
	} else {
		errs["Conn"] = pgx.ErrTxClosed
	}
	return errs
}

// TestStaleHandlerTxSendsNothing: the Tx a handler was handed, and a savepoint of it, refuse
// every statement with pgx.ErrTxClosed once the claim's transaction ended, however it ended:
// the answer stored, the claim released (NotExecuted, a panic), a checkpoint, or the handler
// ending the transaction itself. Before, the pgx.Tx underneath never learned of it (Complete
// commits in its batch, a release rolls back in raw SQL), and a statement through it, from a
// goroutine the handler left behind, ran without error on the pooled connection inside the
// next claim's transaction (maybe another tenant's) and committed with its answer. The
// first phase's Tx tried after a checkpoint fails the claim (503, nothing of the next phase
// stored: TestFailedStatementFailsTheClaim).
func TestStaleHandlerTxSendsNothing(t *testing.T) {
	for _, tc := range []struct {
		end  string
		code int
	}{
		{"stored", 201}, {"not executed", 400}, {"panic", 0}, {"checkpoint", 503}, {"ended by the handler", 500},
	} {
		t.Run(tc.end, func(t *testing.T) {
			stale := make(chan [2]pgx.Tx, 1) // the Tx, and a savepoint of it
			inB := make(chan struct{})
			staleDone := make(chan [2]map[string]error)
			pool, post := staleServer(t, map[string]http.Handler{
				"a": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					ctx := r.Context()
					tx, err := pgserver.MustTx(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if _, err := tx.Exec(ctx, "INSERT INTO payments (reference, idem_key, amount) VALUES ('kA', 'kA', 1)"); err != nil {
						t.Error(err)
					}
					lo := tx.LargeObjects() // works while the claim lives
					if oid, err := lo.Create(ctx, 0); err != nil {
						t.Errorf("LargeObjects.Create: %v", err)
					} else if err := lo.Unlink(ctx, oid); err != nil {
						t.Errorf("LargeObjects.Unlink: %v", err)
					}
					if tx.Conn() == nil {
						t.Error("Conn: nil while the claim lives")
					}
					sp, err := tx.Begin(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					stale <- [2]pgx.Tx{tx, sp}
					switch tc.end {
					case "not executed":
						_ = idemserver.NotExecuted(r)
						w.WriteHeader(http.StatusBadRequest)
						return
					case "panic":
						panic(http.ErrAbortHandler)
					case "checkpoint":
						if err := idemserver.Checkpoint(r, "charged"); err != nil {
							t.Error(err)
						}
						if _, err := tx.Exec(ctx, "SELECT 1"); !errors.Is(err, pgx.ErrTxClosed) {
							t.Errorf("the first phase's Tx after the checkpoint: %v, want ErrTxClosed", err)
						}
						next, err := pgserver.MustTx(ctx)
						if err != nil {
							t.Error(err)
						} else if _, err := next.Exec(ctx, "SELECT 1"); err != nil {
							t.Errorf("the next phase's Tx: %v", err)
						}
					case "ended by the handler":
						if _, err := tx.Exec(ctx, "ROLLBACK"); err != nil {
							t.Error(err)
						}
					}
					w.WriteHeader(http.StatusCreated)
				}),
				"b": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					tx, err := pgserver.MustTx(r.Context())
					if err != nil {
						t.Error(err)
						return
					}
					if _, err := tx.Exec(r.Context(), "INSERT INTO payments (reference, idem_key, amount) VALUES ('kB', 'kB', 1)"); err != nil {
						t.Error(err)
					}
					close(inB) // kA's Tx is tried while kB's claim holds the connection
					<-staleDone
					w.WriteHeader(http.StatusCreated)
				}),
			})
			if code := post("a", "kA"); code != tc.code {
				t.Fatalf("kA: %d, want %d", code, tc.code)
			}
			txs := <-stale
			results := make(chan [2]map[string]error, 1)
			go func() {
				<-inB
				r := [2]map[string]error{staleCalls(context.Background(), txs[0]), staleCalls(context.Background(), txs[1])}
				results <- r
				staleDone <- r
			}()
			if code := post("b", "kB"); code != 201 { // a stale statement that failed in kB's transaction aborted it
				t.Errorf("kB: %d", code)
			}
			for i, errs := range <-results {
				for method, err := range errs {
					if !errors.Is(err, pgx.ErrTxClosed) {
						t.Errorf("%s of kA's %s after its claim ended: %v, want ErrTxClosed", method, []string{"Tx", "savepoint"}[i], err)
					}
				}
			}
			var staleRows, kB, lo int
			if err := pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE reference = 'stale'), count(*) FILTER (WHERE reference = 'kB'),
				(SELECT count(*) FROM pg_largeobject_metadata WHERE oid = $1) FROM payments`, staleOID).Scan(&staleRows, &kB, &lo); err != nil {
				t.Fatal(err)
			}
			if staleRows != 0 || lo != 0 || kB != 1 {
				t.Fatalf("stale rows %d, stale large objects %d, kB's rows %d: want 0, 0, 1", staleRows, lo, kB)
			}
		})
	}
}

// TestTimedOutHandlerStopsAtTheClaimsEnd: under http.TimeoutHandler the inner handler runs on
// after the 503 went out, and the middleware comes to store that 503 meanwhile. A statement
// the inner handler has in flight finishes first, in the claim's transaction, which is then
// rolled back (ErrHandlerStillRunning: the middleware's 503, nothing stored); every one after
// gets ErrTxClosed, even while the next claim holds the connection. Before, they ran on in
// whatever claim had the connection next, and the claim committed the statement in flight.
func TestTimedOutHandlerStopsAtTheClaimsEnd(t *testing.T) {
	late := make(chan error, 1)
	xidA := make(chan string, 1)
	inB, tried := make(chan struct{}), make(chan struct{})
	const insert = `INSERT INTO payments (reference, idem_key, amount) SELECT 'late-' || pg_current_xact_id()::text, 'kA', 1`
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(tried)
		tx, err := pgserver.MustTx(r.Context())
		if err != nil {
			t.Error(err)
			return
		}
		var xid string
		if err := tx.QueryRow(r.Context(), "SELECT pg_current_xact_id()::text").Scan(&xid); err != nil {
			t.Error(err)
		}
		xidA <- xid
		// A context of its own: the timeout does not stop it. In flight when the middleware
		// comes to store TimeoutHandler's 503 (at 100 ms).
		if _, err := tx.Exec(context.Background(), insert+" FROM pg_sleep(0.3)"); err != nil {
			t.Errorf("the statement in flight: %v", err)
		}
		<-inB // the next claim holds the connection
		_, err = tx.Exec(context.Background(), insert)
		late <- err
	})
	pool, post := staleServer(t, map[string]http.Handler{
		"a": http.TimeoutHandler(slow, 100*time.Millisecond, "timed out"),
		"b": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tx, _ := pgserver.MustTx(r.Context())
			if _, err := tx.Exec(r.Context(), "INSERT INTO payments (reference, idem_key, amount) VALUES ('kB', 'kB', 1)"); err != nil {
				t.Error(err)
			}
			close(inB)
			<-tried // the inner handler above has tried its next statement
			w.WriteHeader(http.StatusCreated)
		}),
	})
	if code := post("a", "kA"); code != http.StatusServiceUnavailable {
		t.Fatalf("kA: %d, want the middleware's 503", code)
	}
	if code := post("b", "kB"); code != 201 {
		t.Fatalf("kB: %d", code)
	}
	if err := <-late; !errors.Is(err, pgx.ErrTxClosed) {
		t.Fatalf("the inner handler's statement after the claim ended: %v, want ErrTxClosed", err)
	}
	var inA, elsewhere int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE reference = 'late-' || $1),
		count(*) FILTER (WHERE reference <> 'late-' || $1) FROM payments WHERE reference LIKE 'late-%'`, <-xidA).Scan(&inA, &elsewhere); err != nil {
		t.Fatal(err)
	}
	if inA != 0 || elsewhere != 0 {
		t.Fatalf("late rows in kA's transaction %d, in another %d: want 0, 0", inA, elsewhere)
	}
}

// TestLeftoverStatementCannotHoldTheClaim: a statement a handler left running (its own
// context, no end) does not hold the claim's end forever: after a few seconds it is cancelled
// and its connection closed, the claim rolls back (503, the key free) and a retry runs once.
func TestLeftoverStatementCannotHoldTheClaim(t *testing.T) {
	defer pgserver.SetTurnTimeout(500 * time.Millisecond)()
	leftover := make(chan error, 1)
	var runs atomic.Int32
	_, post := staleServer(t, map[string]http.Handler{
		"a": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tx, _ := pgserver.MustTx(r.Context())
			if runs.Add(1) == 1 {
				started := make(chan struct{})
				go func() {
					close(started)
					_, err := tx.Exec(context.Background(), "SELECT pg_sleep(60)")
					leftover <- err
				}()
				<-started
				time.Sleep(100 * time.Millisecond) // the statement holds the connection
			}
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{}`)
		}),
	})
	start := time.Now()
	if code := post("a", "k"); code != http.StatusServiceUnavailable {
		t.Fatalf("first: %d, want 503", code)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the claim ended after %s", d)
	}
	if err := <-leftover; err == nil {
		t.Fatal("the leftover statement succeeded")
	}
	code := 0
	for i := 0; i < 50 && code != 201; i++ { // 409 until the server has dropped the old session
		if code = post("a", "k"); code != 201 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if code != 201 || runs.Load() != 2 {
		t.Fatalf("retry: %d after %d runs", code, runs.Load())
	}
}
