package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
	"github.com/idemkit/idem/keystore/pgstore"
)

// storeSpec says which keystore the processes of a run share: a bbolt file (one sender
// process at a time, the default) or a PostgreSQL database (a fleet of senders).
type storeSpec struct {
	Path   string `json:"path,omitempty"`   // bbolt file
	DSN    string `json:"dsn,omitempty"`    // PostgreSQL connection string
	Schema string `json:"schema,omitempty"` // the run's own schema in DSN's database
}

// isPostgres reports whether a -store value is a PostgreSQL URL rather than a file path.
func isPostgres(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

func (s storeSpec) fleet() bool { return s.DSN != "" }

// open opens the keystore; close releases it (and its connection pool).
func (s storeSpec) open(ctx context.Context) (keystore.Store, func(), error) {
	if !s.fleet() {
		// The lock of a killed predecessor is released by the kernel; the timeout is for safety.
		st, err := boltstore.Open(s.Path, &boltstore.Options{Timeout: 5 * time.Second})
		if err != nil {
			return nil, nil, err
		}
		return st, func() { _ = st.Close() }, nil
	}
	pool, err := s.pool(ctx)
	if err != nil {
		return nil, nil, err
	}
	st, err := pgstore.Open(ctx, pool, nil)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return st, func() { _ = st.Close(); pool.Close() }, nil
}

// pool connects to the database with the run's schema as search_path.
func (s storeSpec) pool(ctx context.Context) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(s.DSN)
	if err != nil {
		return nil, fmt.Errorf("-store: %w", err)
	}
	if s.Schema != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = s.Schema
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// preparePostgres creates the run's own schema in the database of dsn and migrates it
// explicitly (pgstore.Open never creates tables), so that runs never see each other's
// records. cleanup drops the schema.
func preparePostgres(ctx context.Context, dsn string) (storeSpec, func(), error) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	spec := storeSpec{DSN: dsn, Schema: "idem_payments_" + hex.EncodeToString(b)}
	admin, err := storeSpec{DSN: dsn}.pool(ctx)
	if err != nil {
		return spec, nil, err
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+spec.Schema); err != nil {
		admin.Close()
		return spec, nil, fmt.Errorf("creating schema %s: %w", spec.Schema, err)
	}
	cleanup := func() {
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+spec.Schema+" CASCADE")
		admin.Close()
	}
	pool, err := spec.pool(ctx)
	if err != nil {
		cleanup()
		return spec, nil, err
	}
	defer pool.Close()
	if err := pgstore.Migrate(ctx, pool); err != nil {
		cleanup()
		return spec, nil, fmt.Errorf("migrating schema %s: %w", spec.Schema, err)
	}
	return spec, cleanup, nil
}
