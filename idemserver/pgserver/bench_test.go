package pgserver_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/pgserver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

var benchBody = []byte(`{"amount":1999,"currency":"eur","customer":"cus_9s6XKzkNRiz8i3","description":"order 4711"}`)

// BenchmarkPostgresRequest measures one POST over loopback that inserts a payment row in
// PostgreSQL, two ways, alternately (one request each per iteration, each to its own server,
// one pool), and reports both times and their ratio:
//
//   - plain: the handler begins a transaction, inserts the payment, commits, answers 201;
//   - idemserver: the same insert behind the middleware on this backend: claim (advisory
//     lock, key row), the insert in the claim's transaction, the stored answer, one commit.
//
// Every request carries a fresh random UUIDv4 key. Needs IDEM_TEST_PG_DSN.
func BenchmarkPostgresRequest(b *testing.B) {
	pool := testPool(b, 8)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, paymentsSchema); err != nil {
		b.Fatal(err)
	}
	_, plain, idem := paymentHandlers(b, pool)
	sp, si := httptest.NewServer(plain), httptest.NewServer(idem)
	defer sp.Close()
	defer si.Close()
	var tp, ti time.Duration
	for b.Loop() {
		t0 := time.Now()
		benchPost(b, sp)
		t1 := time.Now()
		benchPost(b, si)
		tp, ti = tp+t1.Sub(t0), ti+time.Since(t1)
	}
	b.ReportMetric(float64(tp.Nanoseconds())/float64(b.N), "plain-ns/req")
	b.ReportMetric(float64(ti.Nanoseconds())/float64(b.N), "idemserver-ns/req")
	b.ReportMetric(float64(ti)/float64(tp), "ratio")
}

func benchPost(b *testing.B, srv *httptest.Server) {
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/payments", bytes.NewReader(benchBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk_test")
	req.Header.Set("Idempotency-Key", uuid.NewString())
	resp, err := srv.Client().Do(req)
	if err != nil {
		b.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b.Fatalf("status %d: %s", resp.StatusCode, body)
	}
}

// paymentHandlers returns the three handlers the benchmarks compare, each inserting one payment
// row (reference and key: the request's Idempotency-Key) and answering 201 with its id:
//
//   - insert: the INSERT alone, autocommitted (no transaction, no idempotency);
//   - tx: BEGIN, the INSERT, COMMIT: what a handler does to keep its writes atomic;
//   - idem: the INSERT in the claim's transaction (pgserver.MustTx) behind the middleware on
//     this backend, which commits it with the stored answer.
func paymentHandlers(tb testing.TB, pool *pgxpool.Pool) (insert, tx, idem http.Handler) {
	tb.Helper()
	if _, err := pool.Exec(context.Background(), paymentsSchema); err != nil {
		tb.Fatal(err)
	}
	const ins = "INSERT INTO payments (reference, idem_key, amount) VALUES ($1, $2, 1999) RETURNING id"
	write := func(w http.ResponseWriter, id int64) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d,"status":"succeeded"}`, id)
	}
	run := func(w http.ResponseWriter, r *http.Request, q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) bool {
		var id int64
		key := r.Header.Get("Idempotency-Key")
		if err := q.QueryRow(r.Context(), ins, key, key).Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return false
		}
		write(w, id)
		return true
	}
	insert = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		run(w, r, pool)
	})
	tx = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		tx, err := pool.Begin(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer tx.Rollback(r.Context())
		var id int64
		key := r.Header.Get("Idempotency-Key")
		if err := tx.QueryRow(r.Context(), ins, key, key).Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if err := tx.Commit(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		write(w, id)
	})
	mw, err := idemserver.New(idemserver.Config{Backend: pgserver.New(pool), Tenant: func(r *http.Request) (string, error) {
		if r.Header.Get("Authorization") == "" {
			return "", errors.New("unauthenticated")
		}
		return "acct_1", nil
	}})
	if err != nil {
		tb.Fatal(err)
	}
	idem = mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		tx, err := pgserver.MustTx(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		run(w, r, tx)
	}))
	return insert, tx, idem
}
