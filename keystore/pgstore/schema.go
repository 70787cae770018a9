package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SchemaVersion is the schema version this package writes and reads. Migrate and Open refuse a
// database whose schema is newer (*SchemaVersionError); Open also refuses an older one. Version
// 2 added the column parked_until_ns and two partial indexes (see park.go); a release that
// knows only version 1 refuses to open a version 2 database.
const SchemaVersion = 2

// migrateLock is the pg_advisory_xact_lock key that serialises concurrent Migrate calls.
const migrateLock = 0x6964656d // "idem"

// ErrNoSchema: Open found no idem schema in the search_path; run Migrate first.
var ErrNoSchema = errors.New("pgstore: no idem schema in the database (run pgstore.Migrate)")

// ErrNoTargetSchema is returned (wrapped, with PostgreSQL's own error) by Migrate when no
// schema named in the search_path exists, so there is nowhere to create the tables (SQLSTATE
// 3F000). The message names the search_path and the CREATE SCHEMA to run first.
var ErrNoTargetSchema = errors.New("pgstore: nowhere to create the idem tables")

// SchemaVersionError is returned by Open and Migrate when the database's schema version is not
// the one this package supports: newer (written by a newer release; upgrade this program) or,
// from Open only, older (run Migrate).
type SchemaVersionError struct {
	Found     int // the version in the database
	Supported int // SchemaVersion
}

// Error says which version was found and what to do: upgrade the program or run Migrate.
func (e *SchemaVersionError) Error() string {
	if e.Found > e.Supported {
		return fmt.Sprintf("pgstore: database schema version %d is newer than %d, the newest this release supports: upgrade the program", e.Found, e.Supported)
	}
	return fmt.Sprintf("pgstore: database schema version %d is older than %d: run pgstore.Migrate", e.Found, e.Supported)
}

// schemaV1 creates version 1. Times are Unix nanoseconds; a zero time.Time is math.MinInt64 in
// created_ns and updated_ns and NULL in lease_until_ns.
const schemaV1 = `
CREATE TABLE idem_records (
	tenant          bytea   NOT NULL,
	key             bytea   NOT NULL,
	intent          bytea,
	fingerprint     text    NOT NULL,
	method          text    NOT NULL,
	url             text    NOT NULL,
	request_header  bytea,
	request_body    bytea,
	state           text    NOT NULL CHECK (state IN ('pending', 'succeeded', 'failed', 'manual')),
	attempts        bigint  NOT NULL,
	last_status     bigint  NOT NULL,
	reason          text    NOT NULL,
	not_executed    boolean NOT NULL,
	error           text    NOT NULL,
	response_status bigint,
	response_header bytea,
	response_body   bytea,
	created_ns      bigint  NOT NULL,
	updated_ns      bigint  NOT NULL,
	owner           text,
	lease_until_ns  bigint,
	fence           bigint  NOT NULL CHECK (fence >= 0),
	note            text    NOT NULL,
	PRIMARY KEY (tenant, key)
);
CREATE UNIQUE INDEX idem_records_intent ON idem_records (tenant, intent) WHERE intent IS NOT NULL;
CREATE INDEX idem_records_pending ON idem_records (created_ns, key, tenant) WHERE state = 'pending';
CREATE INDEX idem_records_purge ON idem_records (updated_ns) WHERE state IN ('succeeded', 'failed');
`

// schemaV2 raises version 1 to 2. parked_until_ns is set on a pending row that a claim took,
// or whose live lease a claim walked past (park.go): the claims' index leaves it out until
// then. Adding a nullable column without a default rewrites nothing, but it locks the table
// until Migrate's transaction ends, and the index on the unparked rows is built from every
// pending row in it: reads and writes of idem_records wait for the build (3 s for a million
// pending rows on a 2-core machine). The parked index starts empty. idem_records_pending
// stays: ListPage and List walk it, and a version 1 release still running beside this one
// claims with it.
const schemaV2 = `
ALTER TABLE idem_records ADD COLUMN parked_until_ns bigint;
CREATE INDEX idem_records_unparked ON idem_records (created_ns, key, tenant)
	WHERE state = 'pending' AND parked_until_ns IS NULL;
CREATE INDEX idem_records_parked ON idem_records (parked_until_ns)
	WHERE state = 'pending' AND parked_until_ns IS NOT NULL;
`

// Migrate creates the idem tables in the first existing schema of the search_path, or upgrades
// them to SchemaVersion. It is idempotent, and concurrent calls are serialised by an advisory
// lock. It returns a *SchemaVersionError if the database holds a newer schema, changing
// nothing, ErrNoTargetSchema (wrapping the database's error) if no schema of the search_path
// exists (it creates no schema: that is the DBA's choice), or the database's error.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	err := migrate(ctx, pool)
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok && pe.Code == "3F000" { // invalid_schema_name
		return noTargetSchema(ctx, pool, err)
	}
	return err
}

// noTargetSchema is ErrNoTargetSchema wrapping err, naming the search_path and the schema to
// create: the first one that is not "$user".
func noTargetSchema(ctx context.Context, pool *pgxpool.Pool, err error) error {
	var sp string
	if pool.QueryRow(ctx, `SELECT current_setting('search_path')`).Scan(&sp) != nil {
		return fmt.Errorf("%w (CREATE SCHEMA first, or set search_path in the DSN): %w", ErrNoTargetSchema, err)
	}
	name := "<name>"
	for s := range strings.SplitSeq(sp, ",") {
		if s = strings.TrimSpace(s); s != "" && s != `"$user"` && s != "$user" {
			name = s
			break
		}
	}
	return fmt.Errorf("%w: search_path %q names no existing schema; run CREATE SCHEMA %s first (or fix search_path in the DSN): %w",
		ErrNoTargetSchema, sp, name, err)
}

func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLock); err != nil {
			return fmt.Errorf("pgstore: migrate: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS idem_schema (
			one     boolean PRIMARY KEY DEFAULT true CHECK (one),
			version integer NOT NULL)`); err != nil {
			return fmt.Errorf("pgstore: migrate: %w", err)
		}
		var v int
		err := tx.QueryRow(ctx, `SELECT version FROM idem_schema`).Scan(&v)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			v = 0
		case err != nil:
			return fmt.Errorf("pgstore: migrate: reading the schema version: %w", err)
		}
		if v > SchemaVersion {
			return &SchemaVersionError{Found: v, Supported: SchemaVersion}
		}
		if v == SchemaVersion {
			return nil
		}
		// Each step raises the version by one, from the one before, in this transaction.
		if v == 0 {
			if _, err := tx.Exec(ctx, schemaV1); err != nil {
				return fmt.Errorf("pgstore: migrate to version 1: %w", err)
			}
		}
		if v <= 1 {
			if _, err := tx.Exec(ctx, schemaV2); err != nil {
				return fmt.Errorf("pgstore: migrate to version 2: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO idem_schema (version) VALUES ($1)
			ON CONFLICT (one) DO UPDATE SET version = EXCLUDED.version`, SchemaVersion); err != nil {
			return fmt.Errorf("pgstore: migrate: %w", err)
		}
		return nil
	})
}

// checkSchema returns nil if the database holds schema SchemaVersion, ErrNoSchema if it holds
// none, a *SchemaVersionError if another.
func checkSchema(ctx context.Context, pool *pgxpool.Pool) error {
	var v int
	err := pool.QueryRow(ctx, `SELECT version FROM idem_schema`).Scan(&v)
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok && pe.Code == "42P01" { // undefined_table
		return ErrNoSchema
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ErrNoSchema
	case err != nil:
		return fmt.Errorf("pgstore: reading the schema version: %w", err)
	case v != SchemaVersion:
		return &SchemaVersionError{Found: v, Supported: SchemaVersion}
	}
	return nil
}
