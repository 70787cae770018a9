package pgserver_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/pgserver"
	"github.com/idemkit/idem/idemserver/servertest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// testPool returns a pool on a fresh schema (search_path), migrated, dropped at the end.
func testPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return testPoolWith(t, maxConns, nil)
}

// testPoolWith is testPool with configure applied to the pool's configuration (nil: none).
func testPoolWith(t testing.TB, maxConns int32, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	dsn := os.Getenv("IDEM_TEST_PG_DSN")
	if dsn == "" {
		t.Skip("IDEM_TEST_PG_DSN not set: skipping the PostgreSQL server backend tests")
	}
	ctx := context.Background()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "idemsrv_" + hex.EncodeToString(b[:])
	admin, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		admin.Close()
		t.Fatalf("create schema: %v", err)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse dsn: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = maxConns
	if configure != nil {
		configure(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		if _, err := admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema: %v", err)
		}
		admin.Close()
	})
	for i := 0; i < 2; i++ { // idempotent
		if err := pgserver.Migrate(ctx, pool); err != nil {
			t.Fatalf("Migrate #%d: %v", i+1, err)
		}
	}
	return pool
}

// TestConformance runs the suite with the clock check off: its injected clock starts on
// 2026-01-02 and jumps past leases and retention, far from the database's (clock_test.go
// covers the check).
func TestConformance(t *testing.T) {
	servertest.Run(t, func(t *testing.T) idemserver.Backend {
		return pgserver.NewWithOptions(testPool(t, 20), pgserver.Options{MaxClockSkew: -1})
	})
}
