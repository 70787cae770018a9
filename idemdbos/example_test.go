package idemdbos_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemdbos"
	"github.com/idemkit/idem/keystore/pgstore"
)

// A DBOS workflow pays an order in a step whose key is the step's identity. DBOS retries the
// step only while the outcome is unknown; a stored 5xx ends the step, and the workflow
// sleeps durably and asks again, under the first step's key, until an operator has settled
// the record with Client.Resolve (each ask sends nothing). The keystore lives in the same
// PostgreSQL database as DBOS's, in a schema of its own, so that every executor that may
// recover the workflow sees the record.
func Example() {
	ctx := context.Background()
	dsn := os.Getenv("DATABASE_URL")
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		panic(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = "idem"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	if err := pgstore.Migrate(ctx, pool); err != nil {
		panic(err)
	}
	store, err := pgstore.Open(ctx, pool, nil)
	if err != nil {
		panic(err)
	}
	client, err := idem.NewClient(idem.Config{BaseURL: "https://payments.example.com", Store: store,
		KeyStatusURL: "/v1/payments/operations/{key}"})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	payer, err := idemdbos.New(idemdbos.Config{Client: client, App: "shop"})
	if err != nil {
		panic(err)
	}

	payOrder := func(ctx dbos.Context, reference string) ([]byte, error) {
		body := fmt.Appendf(nil, `{"amount":990,"currency":"EUR","customer":"cus_1","reference":%q}`, reference)
		pay := func(ctx context.Context) ([]byte, error) {
			res, err := payer.Do(ctx, http.MethodPost, "/v1/payments", body, nil)
			if err != nil {
				return nil, err
			}
			return res.Body, nil
		}
		charge, err := dbos.RunAsStep(ctx, pay, dbos.WithStepName("pay"),
			dbos.WithStepMaxRetries(10), dbos.WithStepRetryPredicate(idemdbos.Retryable))
		var e *idemdbos.Error
		for errors.As(err, &e) && e.Kind == idemdbos.KindManual {
			if _, err := dbos.Sleep(ctx, time.Hour); err != nil {
				return nil, err
			}
			step := e.Step
			charge, err = dbos.RunAsStep(ctx, func(ctx context.Context) ([]byte, error) {
				res, err := payer.DoAs(ctx, step, http.MethodPost, "/v1/payments", body, nil)
				if err != nil {
					return nil, err
				}
				return res.Body, nil
			}, dbos.WithStepName("pay-again"))
		}
		return charge, err // KindPermanent, KindKeyConflict, KindNotExecuted: the workflow decides
	}

	app, err := dbos.NewContext(ctx, dbos.Config{AppName: "shop", DatabaseURL: dsn})
	if err != nil {
		panic(err)
	}
	dbos.RegisterWorkflow(app, payOrder, dbos.WithWorkflowName("pay-order"))
	if err := dbos.Launch(app); err != nil {
		panic(err)
	}
	defer dbos.Shutdown(app, 10*time.Second)
	h, err := dbos.RunWorkflow(app, payOrder, "order-7", dbos.WithWorkflowID("order-7"))
	if err != nil {
		panic(err)
	}
	charge, err := h.GetResult()
	fmt.Println(string(charge), err)
}
