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
	"github.com/idemkit/idem/idemserver/servertest"
	"github.com/jackc/pgx/v5/pgxpool"
)

type txServer struct {
	*httptest.Server
	pool  *pgxpool.Pool
	clock *servertest.Clock
	mw    *idemserver.Middleware
}

func newTxServer(t *testing.T, h http.HandlerFunc) *txServer {
	t.Helper()
	return newTxServerWith(t, nil, h)
}

// newTxServerWith is newTxServer over a pool that configure adjusts first (nil: as is).
func newTxServerWith(t *testing.T, configure func(*pgxpool.Config), h http.HandlerFunc) *txServer {
	t.Helper()
	pool := testPoolWith(t, 8, configure)
	if _, err := pool.Exec(context.Background(), paymentsSchema+
		`ALTER TABLE payments ADD COLUMN status text NOT NULL DEFAULT 'succeeded';`); err != nil {
		t.Fatal(err)
	}
	s := &txServer{pool: pool, clock: servertest.NewClock()}
	// The injected clock (2026-01-02, advanced past leases) is far from the database's.
	backend := pgserver.NewWithOptions(pool, pgserver.Options{MaxClockSkew: -1})
	mw, err := idemserver.New(idemserver.Config{Backend: backend, Tenant: bearerTenant, Now: s.clock.Now, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s.mw = mw
	mux := http.NewServeMux()
	mux.Handle("POST /v1/payments", mw.Handler(h))
	mux.Handle("GET /v1/payments/operations/{key}", mw.KeyStatusHandler("POST /v1/payments", nil))
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func (s *txServer) send(t *testing.T, method, path, key, body string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer acct_1")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := s.Client().Do(req)
	if err != nil {
		return 0, nil, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func (s *txServer) count(t *testing.T, query string) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// TestWritesCommitWithAnswer: the handler's writes commit with the stored answer, and an
// answer marked NotExecuted rolls them back with the claim.
func TestWritesCommitWithAnswer(t *testing.T) {
	s := newTxServer(t, func(w http.ResponseWriter, r *http.Request) {
		tx, err := pgserver.MustTx(r.Context())
		if err != nil {
			t.Error(err)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var id int64
		if err := tx.QueryRow(r.Context(), "INSERT INTO payments (reference, idem_key, amount) VALUES ('r1', 'k', 1) RETURNING id").Scan(&id); err != nil {
			t.Error(err)
		}
		if string(body) == "invalid" { // validation found late: nothing of it may stay
			_ = idemserver.NotExecuted(r)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, id)
	})
	if code, _, _ := s.send(t, "POST", "/v1/payments", "k-tx", "invalid"); code != 400 {
		t.Fatalf("invalid: %d", code)
	}
	if n := s.count(t, "SELECT count(*) FROM payments"); n != 0 {
		t.Fatalf("payments after a not-executed answer = %d, want 0", n)
	}
	code, _, first := s.send(t, "POST", "/v1/payments", "k-tx", "ok")
	code2, h2, second := s.send(t, "POST", "/v1/payments", "k-tx", "ok")
	if code != 201 || code2 != 201 || second != first || h2.Get(idemserver.ReplayedHeader) != "true" {
		t.Fatalf("first %d %s, second %d %s", code, first, code2, second)
	}
	if n := s.count(t, "SELECT count(*) FROM payments"); n != 1 {
		t.Fatalf("payments = %d, want 1", n)
	}
	if _, ok := pgserver.Tx(context.Background()); ok {
		t.Fatal("Tx outside a claim: ok")
	}
	if _, err := pgserver.MustTx(context.Background()); !errors.Is(err, pgserver.ErrNoTx) {
		t.Fatalf("MustTx outside a claim = %v", err)
	}
}

// TestCommitFailureRollsBack: when the connection dies before the answer commits, the
// business write and the claim vanish together; the client gets 503 and its retry runs once.
func TestCommitFailureRollsBack(t *testing.T) {
	var s *txServer
	calls := 0
	s = newTxServer(t, func(w http.ResponseWriter, r *http.Request) {
		calls++
		tx, _ := pgserver.MustTx(r.Context())
		if _, err := tx.Exec(r.Context(), "INSERT INTO payments (reference, idem_key, amount) VALUES ('r1', 'k', 1)"); err != nil {
			t.Error(err)
		}
		if calls == 1 { // the database connection is lost after the business write
			// pg_terminate_backend only signals: the backend releases its advisory lock as it
			// exits, after the client has seen the connection fail, and until then the key
			// is rightly in progress (202, 409). Wait for the exit so that the status read
			// and the retry below see the claim gone.
			pid := tx.Conn().PgConn().PID()
			var gone bool
			if err := s.pool.QueryRow(r.Context(), "SELECT pg_terminate_backend($1, 10000)", pid).Scan(&gone); err != nil || !gone {
				t.Errorf("terminate backend %d: %v, gone %v", pid, err, gone)
			}
		}
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"ok":true}`))
	})
	code, h, body := s.send(t, "POST", "/v1/payments", "k-lost", "{}")
	if code != 503 || h.Get("Retry-After") != "1" || !strings.Contains(body, idemserver.ProblemUnavailable) {
		t.Fatalf("lost connection: %d %v %s", code, h, body)
	}
	if n := s.count(t, "SELECT count(*) FROM payments"); n != 0 {
		t.Fatalf("payments after lost commit = %d, want 0", n)
	}
	if code, _, body := s.send(t, "GET", "/v1/payments/operations/k-lost", "", ""); code != 404 {
		t.Fatalf("status after lost commit: %d %s", code, body)
	}
	if code, _, body := s.send(t, "POST", "/v1/payments", "k-lost", "{}"); code != 201 || body != `{"ok":true}` {
		t.Fatalf("retry: %d %s", code, body)
	}
	if n := s.count(t, "SELECT count(*) FROM payments"); n != 1 {
		t.Fatalf("payments = %d, want 1", n)
	}
	if st := s.mw.Stats(); st.StoreErrors != 1 || st.Executed != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestCheckpointResume: a handler that calls a third party commits its first phase with a
// checkpoint; after a crash past it, the key is in progress for the lease, then the next
// request resumes at the recovery point without repeating the first phase.
func TestCheckpointResume(t *testing.T) {
	foreign := 0
	crash := true
	s := newTxServer(t, func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		switch idemserver.RecoveryPoint(r) {
		case "":
			tx, _ := pgserver.MustTx(ctx)
			if _, err := tx.Exec(ctx, "INSERT INTO payments (reference, idem_key, amount, status) VALUES ('r1', 'k', 1, 'pending')"); err != nil {
				t.Error(err)
			}
			if err := idemserver.Checkpoint(r, "payment_created"); err != nil {
				t.Errorf("Checkpoint: %v", err)
				return
			}
			fallthrough
		case "payment_created":
			foreign++ // the card network, called with its own idempotency key
			if crash {
				crash = false
				panic(http.ErrAbortHandler) // the process dies mid-phase 2
			}
			tx, _ := pgserver.MustTx(ctx) // a new transaction since the checkpoint
			if _, err := tx.Exec(ctx, "UPDATE payments SET status = 'succeeded' WHERE reference = 'r1'"); err != nil {
				t.Error(err)
			}
			if err := idemserver.NotExecuted(r); !errors.Is(err, idemserver.ErrAlreadyBegun) {
				t.Errorf("NotExecuted after a checkpoint = %v, want ErrAlreadyBegun", err)
			}
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"status":"succeeded"}`))
		default:
			t.Errorf("recovery point %q", idemserver.RecoveryPoint(r))
		}
	})
	if code, _, _ := s.send(t, "POST", "/v1/payments", "k-cp", "{}"); code != 0 {
		t.Fatalf("crashed request answered %d", code)
	}
	if n := s.count(t, "SELECT count(*) FROM payments WHERE status = 'pending'"); n != 1 {
		t.Fatalf("pending payments after phase 1 = %d, want 1", n)
	}
	if code, h, _ := s.send(t, "POST", "/v1/payments", "k-cp", "{}"); code != 409 || h.Get("Retry-After") != "1" {
		t.Fatalf("inside the lease: %d", code)
	}
	if code, _, body := s.send(t, "GET", "/v1/payments/operations/k-cp", "", ""); code != 202 || body != `{"status":"processing"}` {
		t.Fatalf("status inside the lease: %d %s", code, body)
	}
	s.clock.Advance(time.Minute)
	if code, _, body := s.send(t, "POST", "/v1/payments", "k-cp", "{}"); code != 201 || body != `{"status":"succeeded"}` {
		t.Fatalf("resumed: %d %s", code, body)
	}
	if n := s.count(t, "SELECT count(*) FROM payments WHERE status = 'succeeded'"); n != 1 || foreign != 2 {
		t.Fatalf("succeeded payments %d (want 1), foreign calls %d (want 2)", n, foreign)
	}
	if code, _, body := s.send(t, "GET", "/v1/payments/operations/k-cp", "", ""); code != 200 ||
		body != `{"status":"completed","response_status":201,"response_body":{"status":"succeeded"}}` {
		t.Fatalf("status after resume: %d %s", code, body)
	}
	if st := s.mw.Stats(); st.Takeovers != 1 || st.Executed != 1 || st.Concurrent != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestHandlerCannotCommitTheClaim: a handler that calls Commit (or Rollback) on the claim's
// transaction gets ErrTxOwned and the transaction stays the middleware's: the charge and the
// stored answer commit together, and a retry after the lease replays it. Committed by the
// handler, the charge stood with the key "processing", the client was told 503 "nothing
// stored", and a retry after the lease charged again. A savepoint's Commit still works.
func TestHandlerCannotCommitTheClaim(t *testing.T) {
	var commitErr, rollbackErr, savepointErr error
	s := newTxServer(t, func(w http.ResponseWriter, r *http.Request) {
		tx, err := pgserver.MustTx(r.Context())
		if err != nil {
			t.Error(err)
			return
		}
		sp, err := tx.Begin(r.Context()) // a savepoint
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := sp.Exec(r.Context(), "INSERT INTO payments (reference, idem_key, amount) VALUES ('r-own', 'k', 1)"); err != nil {
			t.Error(err)
		}
		savepointErr = sp.Commit(r.Context())
		commitErr = tx.Commit(r.Context())
		rollbackErr = tx.Rollback(r.Context())
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"pay_own"}`)
	})
	code, _, body := s.send(t, "POST", "/v1/payments", "k-own", "{}")
	if code != 201 || body != `{"id":"pay_own"}` {
		t.Fatalf("first: %d %s", code, body)
	}
	if !errors.Is(commitErr, pgserver.ErrTxOwned) || !errors.Is(rollbackErr, pgserver.ErrTxOwned) || savepointErr != nil {
		t.Fatalf("Commit %v, Rollback %v, savepoint Commit %v", commitErr, rollbackErr, savepointErr)
	}
	s.clock.Advance(2 * time.Minute) // past the lease
	code, h, body := s.send(t, "POST", "/v1/payments", "k-own", "{}")
	if code != 201 || body != `{"id":"pay_own"}` || h.Get(idemserver.ReplayedHeader) != "true" {
		t.Fatalf("retry: %d %s replayed=%q", code, body, h.Get(idemserver.ReplayedHeader))
	}
	if n := s.count(t, "SELECT count(*) FROM payments WHERE reference = 'r-own'"); n != 1 {
		t.Fatalf("payments = %d, want 1", n)
	}
}

// TestHandlerEndingTheClaimKeepsA500: a handler that ends the claim's transaction anyway
// (SQL through it, or a transaction begun on its connection), then charges (the charge
// commits on its own), leaves the key with a stored 500 "effect unknown": the client is told
// so, and no retry, before or after the lease, runs the handler again. Before, the claim's
// row and lock went with the handler's ROLLBACK, the client was told 503 "retry", and every
// retry charged again.
func TestHandlerEndingTheClaimKeepsA500(t *testing.T) {
	for _, end := range []string{"ROLLBACK", "COMMIT", "Conn().Begin then Rollback", "ROLLBACK then panic"} {
		t.Run(end, func(t *testing.T) {
			var runs atomic.Int32
			s := newTxServer(t, func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				tx, err := pgserver.MustTx(r.Context())
				if err != nil {
					t.Error(err)
					return
				}
				if strings.HasPrefix(end, "Conn()") {
					sub, err := tx.Conn().Begin(r.Context())
					if err != nil {
						t.Error(err)
						return
					}
					_ = sub.Rollback(r.Context())
				} else if _, err := tx.Exec(r.Context(), strings.TrimSuffix(end, " then panic")); err != nil {
					t.Error(err)
				}
				if _, err := tx.Exec(r.Context(), "INSERT INTO payments (reference, idem_key, amount) VALUES ('r-end', 'k', 1)"); err != nil {
					t.Error(err)
				}
				if strings.HasSuffix(end, "panic") {
					panic(http.ErrAbortHandler)
				}
				w.WriteHeader(http.StatusCreated)
				fmt.Fprint(w, `{"id":"pay_end"}`)
			})
			code, _, body := s.send(t, "POST", "/v1/payments", "k-end", "{}")
			if strings.HasSuffix(end, "panic") {
				if code != 0 { // net/http drops the connection of a panicking handler
					t.Fatalf("first: %d %s, want the connection dropped", code, body)
				}
			} else if code != 500 || !strings.Contains(body, idemserver.ProblemHandlerFailed) {
				t.Fatalf("first: %d %s, want the 500 of an unknown effect", code, body)
			}
			for _, wait := range []time.Duration{0, 2 * time.Minute} { // before and after the lease
				s.clock.Advance(wait)
				code, h, body := s.send(t, "POST", "/v1/payments", "k-end", "{}")
				if code != 500 || h.Get(idemserver.ReplayedHeader) != "true" || !strings.Contains(body, idemserver.ProblemHandlerFailed) {
					t.Fatalf("retry after %s: %d %s replayed=%q", wait, code, body, h.Get(idemserver.ReplayedHeader))
				}
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("handler ran %d times", n)
			}
			if n := s.count(t, "SELECT count(*) FROM payments WHERE reference = 'r-end'"); n != 1 {
				t.Fatalf("payments = %d, want 1", n)
			}
		})
	}
}

// TestEndedClaimIgnoresTheHandlersVerdict: once the handler ended the claim's transaction,
// neither its "not executed" (idemserver.NotExecuted) nor the answer it gives after a
// Checkpoint that found the transaction ended (ErrTxEnded) is believed: its charge stands
// either way, so the key keeps the 500 of an unknown effect. Before, NotExecuted freed the
// key (every retry charged again), and the answer after the Checkpoint was stored as the
// key's.
func TestEndedClaimIgnoresTheHandlersVerdict(t *testing.T) {
	for _, tc := range []string{"NotExecuted", "Checkpoint"} {
		t.Run(tc, func(t *testing.T) {
			var runs atomic.Int32
			var checkpointErr error
			s := newTxServer(t, func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				tx, err := pgserver.MustTx(r.Context())
				if err != nil {
					t.Error(err)
					return
				}
				end := "ROLLBACK"
				if tc == "Checkpoint" {
					end = "COMMIT"
				}
				if _, err := tx.Exec(r.Context(), end); err != nil {
					t.Error(err)
				}
				if _, err := tx.Exec(r.Context(), "INSERT INTO payments (reference, idem_key, amount) VALUES ('r-v', 'k', 1)"); err != nil {
					t.Error(err)
				}
				if tc == "NotExecuted" {
					_ = idemserver.NotExecuted(r)
				} else {
					checkpointErr = idemserver.Checkpoint(r, "charged")
				}
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprint(w, `{"error":"try again"}`)
			})
			for i, wait := range []time.Duration{0, 0, 2 * time.Minute} {
				s.clock.Advance(wait)
				code, _, body := s.send(t, "POST", "/v1/payments", "k-v", "{}")
				if code != 500 || !strings.Contains(body, idemserver.ProblemHandlerFailed) {
					t.Fatalf("try %d: %d %s, want the 500 of an unknown effect", i+1, code, body)
				}
			}
			if tc == "Checkpoint" && !errors.Is(checkpointErr, pgserver.ErrTxEnded) {
				t.Errorf("Checkpoint = %v, want ErrTxEnded", checkpointErr)
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("handler ran %d times", n)
			}
			if n := s.count(t, "SELECT count(*) FROM payments WHERE reference = 'r-v'"); n != 1 {
				t.Fatalf("payments = %d, want 1", n)
			}
		})
	}
}
