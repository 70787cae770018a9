package idemriver_test

import (
	"context"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemriver"
	"github.com/idemkit/idem/keystore/pgstore"
)

// An order and its payment job committed in one transaction, and a worker that delivers it
// through idem to an API that dedupes by the Idempotency-Key (an idemserver-backed one here,
// at PAYMENTS_URL). River's tables and idem's records share the database: `river migrate-up`
// (rivermigrate here) and pgstore.Migrate run at deploy time. TestOutboxCommitOrRollback runs
// this flow against a throwaway PostgreSQL.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		log.Fatal(err)
	}
	if err := pgstore.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}

	store, err := pgstore.Open(ctx, pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	payments, err := idem.NewClient(idem.Config{BaseURL: os.Getenv("PAYMENTS_URL"), Store: store,
		KeyStatusURL: "/v1/payments/operations/{key}"})
	if err != nil {
		log.Fatal(err)
	}
	defer payments.Close()

	workers := river.NewWorkers()
	river.AddWorker(workers, &idemriver.Worker{Client: payments,
		OnSuccess: func(ctx context.Context, job *river.Job[idemriver.PaymentArgs], res *idem.Result) error {
			_, err := pool.Exec(ctx, `UPDATE orders SET paid = true WHERE id = $1`, job.Args.Reference)
			return err
		}})
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		Workers: workers,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := rc.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer rc.Stop(ctx)

	// The business transaction: the order and its payment intent, together or not at all.
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, amount) VALUES ($1, $2)`, "order-42", 1250); err != nil {
		log.Fatal(err)
	}
	args, err := idemriver.NewPayment("order-42", http.MethodPost, "/v1/payments",
		[]byte(`{"amount":1250,"currency":"EUR","customer":"cus_1","reference":"order-42"}`))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := idemriver.InsertTx(ctx, rc, tx, args, nil); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
}
