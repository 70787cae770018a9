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
)

// A Checkpoint from a goroutine the handler left behind, run between the middleware's last
// look at the execution and Complete, opened the next phase after Complete had ended the
// handler's use of the transaction: once the claim completed, Tx still answered ok, its Conn
// was the pooled connection serving the next request (a statement through it committed with
// that request), and Exec dereferenced a nil transaction (adversarial run). A claim method
// that ends the claim ends the handler's use again once it holds the connection, and a
// statement finds no transaction after the claim ended. Config.Now only widens the window. The
// claim itself rolls back (503): the handler's statement and Checkpoint were still running as
// its answer came to be stored (ErrHandlerStillRunning).
func TestCheckpointRacingCompleteDoesNotReopenTheTx(t *testing.T) {
	pool := testPool(t, 1)
	if _, err := pool.Exec(context.Background(), paymentsSchema); err != nil {
		t.Fatal(err)
	}
	var armed atomic.Bool
	inNow, proceed := make(chan struct{}), make(chan struct{})
	now := func() time.Time {
		if armed.CompareAndSwap(true, false) {
			close(inNow)
			<-proceed
		}
		return time.Now()
	}
	mw, err := idemserver.New(idemserver.Config{Backend: pgserver.New(pool), Tenant: bearerTenant, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	staleTx := make(chan error, 1) // what the inner handler saw after its Checkpoint
	inB, bDone := make(chan struct{}), make(chan struct{})
	handlerA := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := pgserver.MustTx(r.Context())
		started := make(chan struct{})
		go func() { // a statement left running: holds the connection for 1 s
			close(started)
			_, _ = tx.Exec(context.Background(), "SELECT pg_sleep(1)")
		}()
		<-started
		time.Sleep(50 * time.Millisecond)
		go func() { // a goroutine left behind that checkpoints and carries on
			<-inNow // the middleware is past its look at the execution, about to Complete
			go func() { time.Sleep(200 * time.Millisecond); close(proceed) }()
			if err := idemserver.Checkpoint(r, "p2"); err != nil {
				staleTx <- nil // also fine: the claim ended first
				close(bDone)
				return
			}
			<-inB // the claim has completed and the next request holds the connection
			tx2, ok := pgserver.Tx(r.Context())
			if !ok {
				staleTx <- nil // expected: the claim's transaction has ended
				close(bDone)
				return
			}
			var msgs []string
			msgs = append(msgs, "Tx(ctx) ok after the claim completed")
			if c := tx2.Conn(); c != nil {
				_, err := c.Exec(context.Background(), "INSERT INTO payments (reference, idem_key, amount) VALUES ('stale', 'kA', 999)")
				msgs = append(msgs, fmt.Sprintf("Conn() non-nil, Exec through it: err=%v", err))
			}
			func() {
				defer func() {
					if p := recover(); p != nil {
						msgs = append(msgs, fmt.Sprintf("tx.Exec panicked: %v", p))
					}
				}()
				_, err := tx2.Exec(context.Background(), "SELECT 1")
				msgs = append(msgs, fmt.Sprintf("tx.Exec: %v", err))
			}()
			staleTx <- errors.New(strings.Join(msgs, "; "))
			close(bDone)
		}()
		armed.Store(true) // the middleware's next Config.Now call is Complete's
		w.WriteHeader(http.StatusCreated)
	})
	mux := http.NewServeMux()
	mux.Handle("POST /a", mw.Handler(handlerA))
	mux.Handle("POST /b", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := pgserver.MustTx(r.Context())
		if _, err := tx.Exec(r.Context(), "INSERT INTO payments (reference, idem_key, amount) VALUES ('kB', 'kB', 1)"); err != nil {
			t.Error(err)
		}
		close(inB)
		select {
		case <-bDone:
		case <-time.After(3 * time.Second):
		}
		w.WriteHeader(http.StatusCreated)
	})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	post := func(path, key string) int {
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader("{}"))
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
	if code := post("/a", "kA"); code != http.StatusServiceUnavailable {
		t.Fatalf("kA: %d, want 503", code)
	}
	if code := post("/b", "kB"); code != http.StatusCreated {
		t.Errorf("kB: %d", code)
	}
	if err := <-staleTx; err != nil {
		t.Errorf("the inner handler after its claim completed: %v", err)
	}
	var stale int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM payments WHERE reference = 'stale'").Scan(&stale); err != nil {
		t.Fatal(err)
	}
	if stale != 0 {
		t.Errorf("%d stale row(s) committed with kB's transaction", stale)
	}
}
