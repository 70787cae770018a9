package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/keystoretest"
	"github.com/idemkit/idem/keystore/pgstore"
)

// needPG returns the DSN of the test database, or skips t with one line if it is not set; in
// CI (CI set), where scripts/test.sh starts a server, a missing DSN fails the test instead.
func needPG(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("IDEM_TEST_PG_DSN")
	if dsn == "" && os.Getenv("CI") != "" {
		t.Fatal("IDEM_TEST_PG_DSN not set in CI: the PostgreSQL tests must run there (scripts/test.sh starts a server)")
	}
	if dsn == "" {
		t.Skip("IDEM_TEST_PG_DSN not set: skipping PostgreSQL tests (e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)")
	}
	return dsn
}

// testSchema creates a fresh schema in the database of IDEM_TEST_PG_DSN, dropped when t ends,
// and returns a function that opens pools whose search_path is that schema. Without the
// variable the test is skipped.
func testSchema(t testing.TB) func() *pgxpool.Pool {
	t.Helper()
	dsn := needPG(t)
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatalf("pgxpool.New: %v", err)
	}
	b := make([]byte, 8)
	rand.Read(b)
	schema := "idem_test_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		admin.Close()
		t.Fatalf("create schema: %v", err)
	}
	var pools []*pgxpool.Pool
	t.Cleanup(func() {
		for _, p := range pools {
			p.Close()
		}
		if _, err := admin.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`); err != nil {
			t.Errorf("drop schema: %v", err)
		}
		admin.Close()
	})
	return func() *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			t.Fatalf("ParseConfig: %v", err)
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatalf("pgxpool: %v", err)
		}
		pools = append(pools, p)
		return p
	}
}

// openStore migrates the pool's schema and opens a Store on it.
func openStore(t testing.TB, pool *pgxpool.Pool, opts *pgstore.Options) *pgstore.Store {
	t.Helper()
	ctx := context.Background()
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	s, err := pgstore.Open(ctx, pool, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	needPG(t)
	keystoretest.Run(t, func(t *testing.T) keystore.Store {
		return openStore(t, testSchema(t)(), nil)
	})
}

// TestShared runs the fleet cases with two Stores on two pools: two instances on one database.
func TestShared(t *testing.T) {
	needPG(t)
	keystoretest.RunShared(t, func(t *testing.T) (keystore.Store, keystore.Store) {
		pools := testSchema(t)
		a := openStore(t, pools(), nil)
		return a, openStore(t, pools(), nil)
	})
}

// A search_path whose schemas do not exist: Migrate says so, naming the search_path and the
// CREATE SCHEMA to run, and the error is ErrNoTargetSchema wrapping PostgreSQL's 3F000.
func TestMigrateMissingSchema(t *testing.T) {
	dsn := needPG(t)
	ctx := context.Background()
	for _, tc := range []struct{ searchPath, create string }{
		{"idem_missing_x", "CREATE SCHEMA idem_missing_x"},
		{`"$user", idem_missing_y`, "CREATE SCHEMA idem_missing_y"},
	} {
		t.Run(tc.searchPath, func(t *testing.T) {
			cfg, err := pgxpool.ParseConfig(dsn)
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.RuntimeParams["search_path"] = tc.searchPath
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			err = pgstore.Migrate(ctx, pool)
			if !errors.Is(err, pgstore.ErrNoTargetSchema) {
				t.Fatalf("Migrate: %v, want ErrNoTargetSchema", err)
			}
			if pe, ok := errors.AsType[*pgconn.PgError](err); !ok || pe.Code != "3F000" {
				t.Errorf("Migrate: %v does not wrap the 3F000 PgError", err)
			}
			for _, want := range []string{"search_path " + strconv.Quote(tc.searchPath), tc.create} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

func TestMigrate(t *testing.T) {
	ctx := context.Background()
	pool := testSchema(t)()
	_, err := pgstore.Open(ctx, pool, nil)
	if !errors.Is(err, pgstore.ErrNoSchema) {
		t.Fatalf("Open before Migrate: %v, want ErrNoSchema", err)
	}
	var wg sync.WaitGroup
	for range 4 { // concurrent and repeated Migrates: one schema, no error
		wg.Go(func() {
			if err := pgstore.Migrate(ctx, pool); err != nil {
				t.Errorf("Migrate: %v", err)
			}
		})
	}
	wg.Wait()
	s := openStore(t, pool, nil) // Migrate once more, then Open
	rec := &keystore.Record{Scope: "t", Key: "k", Fingerprint: "f", State: keystore.StatePending,
		Request: keystore.Request{Method: "POST", URL: "/v1/payments"}}
	if err := s.Create(ctx, rec); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate of a current schema: %v", err)
	}
	if _, err := s.Get(ctx, "t", "k"); err != nil {
		t.Fatalf("record after a second Migrate: %v", err)
	}

	if _, err := pool.Exec(ctx, `UPDATE idem_schema SET version = $1`, pgstore.SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"Migrate": pgstore.Migrate(ctx, pool),
		"Open":    func() error { _, err := pgstore.Open(ctx, pool, nil); return err }(),
	} {
		var ve *pgstore.SchemaVersionError
		if !errors.As(err, &ve) || ve.Found != pgstore.SchemaVersion+1 || ve.Supported != pgstore.SchemaVersion {
			t.Fatalf("%s of a newer schema: %v, want *SchemaVersionError{%d, %d}", name, err, pgstore.SchemaVersion+1, pgstore.SchemaVersion)
		}
	}
	var version int
	if err := pool.QueryRow(ctx, `SELECT version FROM idem_schema`).Scan(&version); err != nil || version != pgstore.SchemaVersion+1 {
		t.Fatalf("refused Migrate changed the version to %d (%v)", version, err)
	}
}

// TestNoSecretsInRows reads the raw rows: no credential or secret header reaches the database.
func TestNoSecretsInRows(t *testing.T) {
	ctx := context.Background()
	pool := testSchema(t)()
	s := openStore(t, pool, &pgstore.Options{SecretHeaders: []string{"X-Api-Key"}})
	rec := &keystore.Record{Scope: "t", Key: "k", Fingerprint: "f", State: keystore.StatePending,
		Request: keystore.Request{Method: "POST", URL: "/v1/payments", Header: map[string][]string{
			"Authorization": {"Bearer sk_live_1"}, "Cookie": {"sk_live_2"}, "X-Api-Key": {"sk_live_3"},
			"Proxy-Authorization": {"sk_live_4"}, "Content-Type": {"application/json"}}}}
	if err := s.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	done := rec.Clone()
	done.State = keystore.StateSucceeded
	done.Response = &keystore.Response{StatusCode: 200, Header: map[string][]string{
		"Set-Cookie": {"sk_live_5"}, "X-Api-Key": {"sk_live_6"}, "Request-Id": {"req_1"}}}
	if err := s.Update(ctx, done); err != nil {
		t.Fatal(err)
	}
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM idem_records
		WHERE position('sk_live' in convert_from(request_header, 'UTF8') || convert_from(response_header, 'UTF8')) > 0`).Scan(&n)
	if err != nil || n != 0 {
		t.Fatalf("rows holding a secret: %d (%v)", n, err)
	}
	var hdr string
	if err := pool.QueryRow(ctx, `SELECT convert_from(request_header, 'UTF8') FROM idem_records`).Scan(&hdr); err != nil || hdr != `{"Content-Type":["application/json"]}` {
		t.Fatalf("stored request header %q (%v)", hdr, err)
	}
}

// TestInvalidForPostgres: what PostgreSQL cannot store unchanged is refused before any write.
func TestInvalidForPostgres(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, testSchema(t)(), nil)
	bad := map[string]func(r *keystore.Record){
		"NUL in fingerprint":     func(r *keystore.Record) { r.Fingerprint = "a\x00b" },
		"invalid UTF-8 in url":   func(r *keystore.Record) { r.Request.URL = "/\xff" },
		"NUL in error":           func(r *keystore.Record) { r.Error = "\x00" },
		"time before 1678":       func(r *keystore.Record) { r.CreatedAt = time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC) },
		"time after 2261":        func(r *keystore.Record) { r.UpdatedAt = time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC) },
		"invalid UTF-8 in owner": func(r *keystore.Record) { r.Owner = "\xfe"; r.Fence = 1 },
	}
	for name, change := range bad {
		rec := &keystore.Record{Scope: "t", Key: "k", Fingerprint: "f", State: keystore.StatePending,
			Request: keystore.Request{Method: "POST", URL: "/v1/payments"}}
		change(rec)
		if err := s.Create(ctx, rec); !errors.Is(err, keystore.ErrInvalid) {
			t.Fatalf("Create with %s: %v, want ErrInvalid", name, err)
		}
	}
	if all, err := s.List(ctx); err != nil || len(all) != 0 {
		t.Fatalf("List after refused Creates: %d records, %v", len(all), err)
	}
	// The zero time reads back as the zero time.
	rec := &keystore.Record{Scope: "t", Key: "zero", Fingerprint: "f", State: keystore.StatePending,
		Request: keystore.Request{Method: "POST", URL: "/v1/payments"}}
	if err := s.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "t", "zero")
	if err != nil || !got.CreatedAt.IsZero() || !got.UpdatedAt.IsZero() || !got.LeaseUntil.IsZero() {
		t.Fatalf("zero times read back as %v %v %v (%v)", got.CreatedAt, got.UpdatedAt, got.LeaseUntil, err)
	}
}

// A pool whose sessions run with synchronous_commit off is refused: a crash would lose
// acknowledged records (a fleet run with PostgreSQL restarted under it charged payments
// twice that way). With it on, or remote_write, Open succeeds.
func TestOpenRefusesAsynchronousCommit(t *testing.T) {
	dsn := needPG(t)
	ctx := context.Background()
	setup := testSchema(t)
	if err := pgstore.Migrate(ctx, setup()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		value string
		want  error
	}{{"off", pgstore.ErrAsyncCommit}, {"on", nil}, {"remote_write", nil}} {
		pool := setup()
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		search := conn.Conn().Config().RuntimeParams["search_path"]
		conn.Release()
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = search
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = tc.value
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		s, err := pgstore.Open(ctx, p, nil)
		if !errors.Is(err, tc.want) {
			t.Errorf("synchronous_commit=%s: Open = %v, want %v", tc.value, err, tc.want)
		}
		if s != nil {
			_ = s.Close()
		}
		p.Close()
	}
}
