package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/pgstore"
)

// version1DDL is what Migrate of the release before schema version 2 ran on an empty schema,
// copied from it (commit e4e68a8): the tests below build a version 1 database with it.
const version1DDL = `CREATE TABLE idem_schema (
	one     boolean PRIMARY KEY DEFAULT true CHECK (one),
	version integer NOT NULL);
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
INSERT INTO idem_schema (version) VALUES (1);
`

// version1Claim is the orphan claim of the release before schema version 2, copied from it:
// an instance of that release, opened before the upgrade, keeps running it.
const version1Claim = `WITH orphans AS (
		SELECT tenant, key FROM idem_records
		WHERE state = 'pending' AND (owner IS NULL OR lease_until_ns IS NULL OR lease_until_ns <= $1)
		ORDER BY created_ns, key, tenant
		LIMIT $4
		FOR UPDATE SKIP LOCKED)
	UPDATE idem_records r SET owner = $2, lease_until_ns = $3, fence = r.fence + 1
	FROM orphans o WHERE r.tenant = o.tenant AND r.key = o.key
	RETURNING convert_from(r.key, 'UTF8')`

// version1Row inserts a pending row as the release before version 2 wrote it: created at
// parkT0 + created seconds, leased by owner until parkT0 + until when owner is set.
func version1Row(t *testing.T, pool *pgxpool.Pool, key string, created int, owner string, until time.Duration) {
	t.Helper()
	var o *string
	var u *int64
	if owner != "" {
		n := parkT0.Add(until).UnixNano()
		o, u = &owner, &n
	}
	at := parkT0.Add(time.Duration(created) * time.Second).UnixNano()
	_, err := pool.Exec(context.Background(), `INSERT INTO idem_records (tenant, key, fingerprint, method, url,
		request_header, request_body, state, attempts, last_status, reason, not_executed, error,
		created_ns, updated_ns, owner, lease_until_ns, fence, note)
		VALUES ('t', $1, 'f', 'POST', '/v1/payments', '{}', '', 'pending', 1, 0, '', false, '', $2, $2, $3, $4, 1, '')`,
		[]byte(key), at, o, u)
	if err != nil {
		t.Fatal(err)
	}
}

// A version 1 database holding pending rows with live and lapsed leases: Open refuses it until
// Migrate raises it to 2; then claims return the orphans oldest first and never a live lease,
// and the live rows come back when their leases lapse. No record is lost.
func TestMigrateFromVersion1(t *testing.T) {
	ctx := context.Background()
	pool := testSchema(t)()
	if _, err := pool.Exec(ctx, version1DDL); err != nil {
		t.Fatal(err)
	}
	version1Row(t, pool, "live1", 1, "busy", time.Hour)
	version1Row(t, pool, "live2", 2, "busy", time.Hour)
	version1Row(t, pool, "orph3", 3, "dead", -time.Minute)
	version1Row(t, pool, "free4", 4, "", 0)
	version1Row(t, pool, "live5", 5, "busy", time.Hour)
	version1Row(t, pool, "orph6", 6, "dead", 0)
	if _, err := pool.Exec(ctx, `INSERT INTO idem_records (tenant, key, fingerprint, method, url, request_body, state,
		attempts, last_status, reason, not_executed, error, created_ns, updated_ns, fence, note)
		VALUES ('t', 'done', 'f', 'POST', '/v1/payments', '', 'succeeded', 1, 200, '', false, '', 0, 0, 0, '')`); err != nil {
		t.Fatal(err)
	}

	var ve *pgstore.SchemaVersionError
	if _, err := pgstore.Open(ctx, pool, nil); !errors.As(err, &ve) || ve.Found != 1 || ve.Supported != 2 ||
		!strings.Contains(err.Error(), "run pgstore.Migrate") {
		t.Fatalf("Open of a version 1 database: %v, want *SchemaVersionError{1, 2} saying to run Migrate", err)
	}
	s := openStore(t, pool, nil) // Migrate, then Open
	var version int
	if err := pool.QueryRow(ctx, `SELECT version FROM idem_schema`).Scan(&version); err != nil || version != 2 {
		t.Fatalf("schema version after Migrate: %d (%v), want 2", version, err)
	}
	var indexes string
	if err := pool.QueryRow(ctx, `SELECT string_agg(indexname, ' ' ORDER BY indexname) FROM pg_indexes
		WHERE tablename = 'idem_records' AND schemaname = current_schema()`).Scan(&indexes); err != nil {
		t.Fatal(err)
	}
	if want := "idem_records_intent idem_records_parked idem_records_pending idem_records_pkey idem_records_purge idem_records_unparked"; indexes != want {
		t.Fatalf("indexes after Migrate: %s, want %s", indexes, want)
	}
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}

	pgstore.SetParkLimits(t, 0, 2)
	if got := claimKeys(t, s, "inst-b", 0, 2); got != "orph3 free4" {
		t.Fatalf("first claim after Migrate: %q, want orph3 free4", got)
	}
	if got := parked(t, pool); strings.Join(got, " ") != "free4@1m0s live1@1h0m0s live2@1h0m0s orph3@1m0s" {
		t.Fatalf("parked: %v, want the live rows walked past and the claimed ones", got)
	}
	if got := claimKeys(t, s, "inst-b", 0, 10); got != "orph6" {
		t.Fatalf("second claim: %q, want orph6", got)
	}
	if got := claimKeys(t, s, "inst-c", time.Hour, 10); got != "live1 live2 orph3 free4 live5 orph6" {
		t.Fatalf("claim once every lease lapsed: %q", got)
	}
	all, err := s.List(ctx)
	if err != nil || len(all) != 7 {
		t.Fatalf("records after the claims: %d (%v), want 7", len(all), err)
	}
	for _, r := range all {
		if r.Key == "done" {
			if r.State != keystore.StateSucceeded || r.Fence != 0 {
				t.Errorf("the succeeded record changed: %+v", r)
			}
		} else if r.Fence != 2 && r.Fence != 3 {
			t.Errorf("%s: fence %d after its claims", r.Key, r.Fence)
		}
	}
}

// An instance of the release before version 2, opened before the upgrade, keeps running its
// own claim beside this one: it never takes a live lease, parked or not, takes a parked row
// once its lease lapsed, and this release then finds that row live and parks it again
// instead of handing it out twice. A newly started instance of that release refuses the
// database: its Open required version 1 exactly, and the version is now 2.
func TestVersion1ClaimBesideVersion2(t *testing.T) {
	ctx := context.Background()
	pool := testSchema(t)()
	s := openStore(t, pool, nil)
	pgstore.SetParkLimits(t, 0, 10)
	pendingAt(t, s, "live1", 1, "busy", time.Hour)
	pendingAt(t, s, "orph2", 2, "dead", 0)
	if got := claimKeys(t, s, "inst-new", 0, 1); got != "orph2" {
		t.Fatalf("claim: %q", got)
	}
	if got := parked(t, pool); strings.Join(got, " ") != "live1@1h0m0s orph2@1m0s" {
		t.Fatalf("parked: %v", got)
	}
	oldClaim := func(at, until time.Duration) string {
		rows, err := pool.Query(ctx, version1Claim, parkT0.Add(at).UnixNano(), "inst-old", parkT0.Add(until).UnixNano(), 10)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var keys []string
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return strings.Join(keys, " ")
	}
	if got := oldClaim(30*time.Second, 2*time.Hour); got != "" {
		t.Fatalf("version 1 claim inside the leases: %q, want nothing", got)
	}
	if got := oldClaim(time.Hour, 2*time.Hour); got != "live1 orph2" {
		t.Fatalf("version 1 claim once the leases lapsed: %q, want live1 orph2", got)
	}
	if got := claimKeys(t, s, "inst-new", time.Hour, 10); got != "" {
		t.Fatalf("claim of rows the version 1 instance holds: %q, want nothing", got)
	}
	if got := parked(t, pool); strings.Join(got, " ") != "live1@2h0m0s orph2@2h0m0s" {
		t.Fatalf("parked after the version 1 claim: %v, want both until inst-old's lease", got)
	}
	if got := claimKeys(t, s, "inst-new", 2*time.Hour, 10); got != "live1 orph2" {
		t.Fatalf("claim once inst-old's leases lapsed: %q", got)
	}
	var version int
	if err := pool.QueryRow(ctx, `SELECT version FROM idem_schema`).Scan(&version); err != nil || version != 2 {
		t.Fatalf("schema version %d (%v), want 2", version, err)
	}

	// Going back, as docs/KEYSTORE.md says: the release before finds version 1 and its rows.
	if _, err := pool.Exec(ctx, `BEGIN;
		DROP INDEX idem_records_unparked, idem_records_parked;
		ALTER TABLE idem_records DROP COLUMN parked_until_ns;
		UPDATE idem_schema SET version = 1;
		COMMIT;`); err != nil {
		t.Fatalf("going back to version 1: %v", err)
	}
	if got := oldClaim(3*time.Hour, 4*time.Hour); got != "live1 orph2" {
		t.Fatalf("version 1 claim after going back: %q, want live1 orph2", got)
	}
	var ve *pgstore.SchemaVersionError
	if _, err := pgstore.Open(ctx, pool, nil); !errors.As(err, &ve) || ve.Found != 1 {
		t.Fatalf("Open after going back: %v, want *SchemaVersionError{Found: 1}", err)
	}
}
