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
// updated timestamps; the lease (owner, expiry, fencing token); and, from schema version 2,
// parked_until_ns (see below). Partial indexes serve the pending list (state pending, by
// creation time), orphan reclaim (the pending rows not parked, by creation time; the parked
// ones by the time they are parked until) and the retention purge (succeeded and failed, by
// update time). Timestamps are nanoseconds since the Unix epoch (bigint), so that a record
// reads back exactly as written; tenants, keys and intents are bytea, so that any bytes
// round-trip.
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
// them in the same statement, so concurrent reclaimers never receive the same record. So that
// a claim does not walk past rows whose lease is live (another instance's calls in flight, a
// recovery's claims), those rows are parked: parked_until_ns holds their lease expiry, the
// claim's index leaves them out, and each ClaimExpired first puts back those whose time has
// passed. The rule is unchanged: a live lease is never claimed, orphans come out oldest first.
//
// Version 2 came with this release; Migrate raises a version 1 database in one transaction
// that holds idem_records locked while it builds the new index (reads and writes wait: 3 s for
// a million pending rows on a 2-core machine). Instances of the release before it that are
// running go on working beside this one (they ignore the column), but a newly started one
// refuses the database (*SchemaVersionError): run Migrate before the new instances start and
// after the last old one has started. docs/KEYSTORE.md says how to go back.
package pgstore
