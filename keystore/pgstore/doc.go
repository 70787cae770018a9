// Package pgstore is a keystore.Store on PostgreSQL (github.com/jackc/pgx/v5, pgxpool), shared
// by every instance of a fleet: the intent index, the leases and the fencing tokens live in
// the database, so that one intent maps to one key fleet-wide, one instance at a time sends a
// key, and any instance reclaims the records of a dead one.
//
// # Schema
//
// Migrate creates or upgrades the schema; it is explicit and idempotent, never a side effect of
// Open, and it refuses (like Open) a schema written by a newer version of this package
// (*SchemaVersionError). The tables live in the first schema of the connection's search_path,
// so a service chooses its schema with the pool configuration (search_path=...).
//
// Table idem_records holds one row per record: the tenant (Record.Scope) and idempotency key
// as primary key; the operation (method, URL); the intent, unique per tenant where set (a
// partial unique index); the request fingerprint, headers (credentials stripped) and body; the
// state, attempts and stop reason; the stored response status, headers and body; created and
// updated timestamps; and the lease (owner, expiry, fencing token). Partial indexes serve the
// pending list and orphan reclaim (state pending, by creation time) and the retention purge
// (succeeded and failed, by update time). Timestamps are nanoseconds since the Unix epoch
// (bigint), so that a record reads back exactly as written; tenants, keys and intents are
// bytea, so that any bytes round-trip.
//
// Credentials never reach the database: keystore.CredentialHeaders, Options.SecretHeaders and,
// in responses, keystore.ResponseSecretHeaders are stripped before a record is written.
//
// # Fleet
//
// Claim, Renew and Release are single UPDATE statements whose WHERE clause holds the rule
// (state pending and no live lease of another owner; the caller's fencing token), so that
// PostgreSQL's row lock decides between concurrent instances. Update compares the fencing
// token in its WHERE clause: a stale owner's write changes nothing and returns a
// *keystore.FencedError. ClaimExpired selects orphans with FOR UPDATE SKIP LOCKED and claims
// them in the same statement, so concurrent reclaimers never receive the same record.
package pgstore
