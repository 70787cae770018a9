package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/keystore/pgstore"
)

// pool connects to c.dsn, giving up after c.timeout. The DSN may carry any libpq parameter,
// search_path included (postgres://u@h/db?search_path=idem). Its password, if any, is never
// printed: errors name only the host and database.
func pool(ctx context.Context, c *common) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(c.dsn)
	if err != nil {
		return nil, usageError{"-dsn is not a Postgres connection string (postgres://user@host:port/db?sslmode=...)"}
	}
	cfg.MaxConns = 4
	where := fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", where, err)
	}
	pctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := p.Ping(pctx); err != nil {
		p.Close()
		return nil, fmt.Errorf("connecting to %s: gave up after %s: %w", where, c.timeout, err)
	}
	return p, nil
}

// openPG opens the Postgres keystore; the schema must exist (idemctl migrate creates it).
func openPG(ctx context.Context, c *common, now func() time.Time) (backend, error) {
	p, err := pool(ctx, c)
	if err != nil {
		return nil, err
	}
	s, err := pgstore.Open(ctx, p, nil)
	if errors.Is(err, pgstore.ErrNoSchema) {
		p.Close()
		return nil, fmt.Errorf("no idem schema in that database (search_path): run idemctl migrate -dsn first: %w", err)
	}
	if err != nil {
		p.Close()
		return nil, err
	}
	return &storeBackend{s: s, now: now, closeFn: p.Close}, nil
}

// cmdMigrate creates or upgrades the Postgres schema (pgstore.Migrate): the explicit step a
// deployment runs before its services open the store.
func cmdMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	fs := newFlags("migrate", stderr, &c)
	if _, err := parse(fs, &c, args, 0); err != nil {
		return err
	}
	if c.dsn == "" {
		return usageError{"migrate works on a Postgres keystore: -dsn DSN"}
	}
	p, err := pool(ctx, &c)
	if err != nil {
		return err
	}
	defer p.Close()
	if err := pgstore.Migrate(ctx, p); err != nil {
		return err
	}
	if c.json {
		return writeJSON(stdout, map[string]int{"schema_version": pgstore.SchemaVersion})
	}
	_, err = fmt.Fprintf(stdout, "idem schema at version %d\n", pgstore.SchemaVersion)
	return err
}
