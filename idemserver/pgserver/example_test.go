package pgserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/pgserver"
)

// A payments handler whose business write commits in the claim's transaction, with the key
// and the stored answer: a crash at any point rolls back all three.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	tenantOf := func(r *http.Request) (string, error) { // from verified credentials
		if r.Header.Get("Authorization") == "" {
			return "", errors.New("unauthenticated")
		}
		return r.Header.Get("Authorization"), nil
	}
	mux := http.NewServeMux()

	if err := pgserver.Migrate(ctx, pool); err != nil { // the keys' table; your payments table is yours to create
		log.Fatal(err)
	}
	mw, err := idemserver.New(idemserver.Config{Backend: pgserver.New(pool), Tenant: tenantOf})
	if err != nil {
		log.Fatal(err)
	}
	mux.Handle("POST /v1/payments", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p struct {
			Reference string `json:"reference"`
			Amount    int64  `json:"amount"`
		}
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.Reference == "" || p.Amount <= 0 {
			_ = idemserver.NotExecuted(r) // a validation answer: not stored, the key stays free
			http.Error(w, `{"error":"invalid_payment"}`, http.StatusBadRequest)
			return
		}
		tx, err := pgserver.MustTx(r.Context()) // the claim's transaction: Commit and Rollback return ErrTxOwned
		if err != nil {                         // ErrNoTx: the middleware's Backend is not pgserver.New(pool)
			_ = idemserver.NotExecuted(r) // else this 500 would be stored as the key's answer
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		var id int64
		if err := tx.QueryRow(r.Context(), "INSERT INTO payments (reference, amount) VALUES ($1, $2) RETURNING id",
			p.Reference, p.Amount).Scan(&id); err != nil {
			_ = idemserver.NotExecuted(r) // rolls the claim's transaction back: nothing stays, the key is free
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, id) // the middleware stores this answer and COMMITs it with the row
	})))

	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}
