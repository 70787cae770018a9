package idemriver_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemriver"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore/pgstore"
)

// needPG returns IDEM_TEST_PG_DSN; without it the test is skipped, except under CI=true,
// where it fails (CI must run these tests).
func needPG(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("IDEM_TEST_PG_DSN")
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("IDEM_TEST_PG_DSN not set under CI=true: scripts/test.sh starts PostgreSQL (.ci/postgres.sh)")
		}
		t.Skip("IDEM_TEST_PG_DSN not set: skipping the River outbox tests (PostgreSQL)")
	}
	return dsn
}

// schemaDSN creates a fresh schema (dropped when t ends), migrates River (rivermigrate) and
// idem's pgstore into it, and returns a pool whose search_path is that schema, with the DSN
// that opens more of them (for a worker process).
func schemaDSN(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	dsn := needPG(t)
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "idemriver_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		admin.Close()
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Close()
		if _, err := admin.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema: %v", err)
		}
		admin.Close()
	})
	migrate(t, pool)
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, amount bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return pool, withSearchPath(dsn, schema)
}

func withSearchPath(dsn, schema string) string {
	sep := "?"
	for _, c := range dsn {
		if c == '?' {
			sep = "&"
		}
	}
	return dsn + sep + "search_path=" + schema
}

// migrate runs River's migrations (what `river migrate-up` does) and pgstore's.
func migrate(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		t.Fatal(err)
	}
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
}

// nowRetry is River's retry schedule in the tests: at once.
type nowRetry struct{}

func (nowRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now() }

// idemClient is the payment client: pgstore on the pool, the idemtest API's status endpoint,
// short timeouts and no real sleeping between attempts.
func idemClient(t testing.TB, pool *pgxpool.Pool, baseURL, owner string, mod func(*idem.Config)) (*idem.Client, *pgstore.Store) {
	t.Helper()
	store, err := pgstore.Open(context.Background(), pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := idem.Config{BaseURL: baseURL, Store: store, KeyStatusURL: idemtest.KeyStatusPathPattern, Fleet: idem.FleetConfig{Owner: owner, LeaseTTL: 600 * time.Millisecond},
		Policy: idem.Policy{AttemptTimeout: 300 * time.Millisecond, MaxRetryAfter: 30 * time.Second},
		Budget: idem.BudgetConfig{Disabled: true},
		Sleep:  func(ctx context.Context, _ time.Duration) error { return ctx.Err() }}
	if mod != nil {
		mod(&cfg)
	}
	c, err := idem.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(); _ = store.Close() })
	return c, store
}

// riverClient is a River client working payment jobs with w; started unless insertOnly.
func riverClient(t testing.TB, pool *pgxpool.Pool, w river.Worker[idemriver.PaymentArgs], mod func(*river.Config)) *river.Client[pgx.Tx] {
	t.Helper()
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	cfg := &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
		Workers:           workers,
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		RetryPolicy:       nowRetry{},
		TestOnly:          true,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if mod != nil {
		mod(cfg)
	}
	rc, err := river.NewClient(riverpgxv5.New(pool), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

func start(t testing.TB, rc *river.Client[pgx.Tx]) {
	t.Helper()
	if err := rc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rc.StopAndCancel(ctx)
	})
}

// waitEvent returns the next event of job id among kinds, or fails after 20 s (a bound: River's scheduler runs every 5 s).
func waitEvent(t testing.TB, events <-chan *river.Event, id int64, kinds ...river.EventKind) *river.Event {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.Job == nil || ev.Job.ID != id {
				continue
			}
			for _, k := range kinds {
				if ev.Kind == k {
					return ev
				}
			}
		case <-deadline:
			t.Fatalf("job %d: no %v event within 20 s", id, kinds)
			return nil
		}
	}
}

// payment returns the args of a payment for order ref (amount 0 is refused by the API: 400).
func payment(t testing.TB, ref string, amount int) idemriver.PaymentArgs {
	t.Helper()
	body := []byte(`{"amount":` + strconv.Itoa(amount) + `,"currency":"EUR","customer":"cus_1","reference":"` + ref + `"}`)
	args, err := idemriver.NewPayment(ref, http.MethodPost, idemtest.PaymentsPath, body)
	if err != nil {
		t.Fatal(err)
	}
	return args
}

// placeOrder writes the order and inserts its payment job in one transaction, committed or
// rolled back; it returns the job's id (0 when rolled back).
func placeOrder(t testing.TB, pool *pgxpool.Pool, rc *river.Client[pgx.Tx], args idemriver.PaymentArgs, amount int, commit bool) int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, amount) VALUES ($1, $2)`, args.Reference, amount); err != nil {
		t.Fatal(err)
	}
	res, err := idemriver.InsertTx(ctx, rc, tx, args, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !commit {
		return 0
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return res.Job.ID
}

// jobState reads the job's row as River keeps it.
func jobRow(t testing.TB, rc *river.Client[pgx.Tx], id int64) *rivertype.JobRow {
	t.Helper()
	row, err := rc.JobGet(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return row
}
