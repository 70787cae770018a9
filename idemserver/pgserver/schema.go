package pgserver

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Table is the table that holds keys and stored answers, in the pool's search_path.
const Table = "idem_server_keys"

// schema is idempotent: Migrate may run on every start, from several instances at once (an
// advisory lock serialises them).
const schema = `
CREATE TABLE IF NOT EXISTS idem_server_keys (
	tenant          text        NOT NULL,
	operation       text        NOT NULL,
	key             text        NOT NULL,
	fingerprint     bytea       NOT NULL,
	state           smallint    NOT NULL,          -- 1 processing (checkpointed), 2 completed
	recovery_point  text        NOT NULL DEFAULT '',
	owner           text,                          -- the claim holding a processing row
	created_at      timestamptz NOT NULL,
	locked_until    timestamptz NOT NULL,
	expires_at      timestamptz,
	response_status integer,
	response_header jsonb,
	response_body   bytea,
	PRIMARY KEY (tenant, operation, key)
);
CREATE INDEX IF NOT EXISTS idem_server_keys_expiry ON idem_server_keys (expires_at) WHERE state = 2;
`

// migrateLock is the advisory lock id that serialises concurrent Migrate calls.
const migrateLock = 0x1de75e7e

// Migrate creates the table and index if they do not exist, in the pool's search_path. It is
// idempotent and safe to run concurrently from several instances.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgserver: migrate: %w", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrateLock)); err != nil {
		return fmt.Errorf("pgserver: migrate: %w", err)
	}
	if _, err := tx.Exec(ctx, schema); err != nil {
		return fmt.Errorf("pgserver: migrate: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgserver: migrate: %w", err)
	}
	return nil
}
