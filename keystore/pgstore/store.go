package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/keystore"
)

// Options configure Open. A nil *Options means every default.
type Options struct {
	// SecretHeaders names extra headers (case-insensitive) that are never written to the
	// database, in addition to keystore.CredentialHeaders; for example "X-Api-Key". They are
	// stripped from requests and responses.
	SecretHeaders []string
}

// Store is a keystore.Store in PostgreSQL. It is safe for concurrent use, and any number of
// Stores, in any number of processes, may share one database: that is the point.
type Store struct {
	pool   *pgxpool.Pool
	secret []string
	closed atomic.Bool
}

var (
	_ keystore.Store               = (*Store)(nil)
	_ keystore.Clock               = (*Store)(nil)
	_ keystore.StateGuardedUpdater = (*Store)(nil)
)

// ErrAsyncCommit is returned by Open when the pool's sessions run with synchronous_commit
// off: PostgreSQL then acknowledges a commit before its WAL is written, and a crash loses it.
// A lost record is worse than none here: the next Do of its intent, finding no record, mints
// a new key and pays again a payment already charged under the lost one. Set
// synchronous_commit to on (or remote_write, remote_apply) for the keystore's role or
// database (ALTER ROLE ... SET synchronous_commit = on) or in the DSN
// ("...?synchronous_commit=on"). A failover to an asynchronous standby loses commits too:
// fail over only to synchronous standbys.
var ErrAsyncCommit = errors.New("pgstore: synchronous_commit is off: a crash could lose acknowledged records, and their payments would be sent again under new keys")

// Open returns a Store on pool, whose schema Migrate must have created. It checks the schema
// and the session's synchronous_commit, and changes nothing: it returns ErrNoSchema if there
// is no schema, a *SchemaVersionError if it is newer (or older) than SchemaVersion,
// ErrAsyncCommit if synchronous_commit is off, or the database's error. The pool stays the
// caller's: Close does not close it.
func Open(ctx context.Context, pool *pgxpool.Pool, opts *Options) (*Store, error) {
	if pool == nil {
		return nil, errors.New("pgstore: Open with a nil pool")
	}
	if err := checkSchema(ctx, pool); err != nil {
		return nil, err
	}
	var commit string
	if err := pool.QueryRow(ctx, `SELECT current_setting('synchronous_commit')`).Scan(&commit); err != nil {
		return nil, fmt.Errorf("pgstore: reading synchronous_commit: %w", err)
	}
	if commit == "off" {
		return nil, ErrAsyncCommit
	}
	s := &Store{pool: pool}
	if opts != nil {
		s.secret = append([]string(nil), opts.SecretHeaders...)
	}
	return s, nil
}

// Close marks the store closed; every later call, Close included, returns keystore.ErrClosed.
// Calls already running finish. The pool is not closed.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return keystore.ErrClosed
	}
	return nil
}

// begin returns keystore.ErrClosed after Close, else ctx.Err().
func (s *Store) begin(ctx context.Context) error {
	if s.closed.Load() {
		return keystore.ErrClosed
	}
	return ctx.Err()
}

// dbErr wraps a database error; a cancelled context is returned as ctx.Err() so that
// errors.Is(err, context.Canceled) holds.
func dbErr(ctx context.Context, what string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("pgstore: %s: %w (%w)", what, cerr, err)
	}
	return fmt.Errorf("pgstore: %s: %w", what, err)
}

// Create inserts rec, without its secret headers. It returns an error wrapping
// keystore.ErrInvalid if rec fails Validate or holds text PostgreSQL or JSON cannot store
// unchanged (invalid UTF-8, NUL bytes) or a time outside 1678-2261; keystore.ErrExists if
// (Scope, Key), or a non-empty (Scope, Intent), is taken in the database (by any instance);
// keystore.ErrClosed after Close; or the database's error. Nothing is written on error.
func (s *Store) Create(ctx context.Context, rec *keystore.Record) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	r, _, err := encode(rec, s.secret)
	if err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO idem_records (`+columns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23)
		ON CONFLICT DO NOTHING`, r.args()...)
	if err != nil {
		return dbErr(ctx, "create", err)
	}
	if tag.RowsAffected() == 0 {
		return keystore.ErrExists
	}
	return nil
}

// Get returns the record for (scope, key): keystore.ErrNotFound if there is none,
// ErrCorrupt if it does not decode, keystore.ErrClosed after Close, or the database's error.
func (s *Store) Get(ctx context.Context, scope, key string) (*keystore.Record, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	return s.getOne(ctx, `SELECT `+columns+` FROM idem_records WHERE tenant = $1 AND key = $2`, []byte(scope), []byte(key))
}

// GetByIntent returns the record created with (scope, intent): keystore.ErrNotFound if there
// is none (always for an empty intent), ErrCorrupt, keystore.ErrClosed, or the database's
// error.
func (s *Store) GetByIntent(ctx context.Context, scope, intent string) (*keystore.Record, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	if intent == "" {
		return nil, keystore.ErrNotFound
	}
	return s.getOne(ctx, `SELECT `+columns+` FROM idem_records WHERE tenant = $1 AND intent = $2`, []byte(scope), []byte(intent))
}

func (s *Store) getOne(ctx context.Context, sql string, args ...any) (*keystore.Record, error) {
	rec, err := scanRecord(s.pool.QueryRow(ctx, sql, args...))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, keystore.ErrNotFound
	case errors.Is(err, ErrCorrupt):
		return nil, err
	case err != nil:
		return nil, dbErr(ctx, "read", err)
	}
	return rec, nil
}

// Update replaces the record (rec.Scope, rec.Key), without its secret headers, if rec carries
// the stored fencing token; the lease columns are left as they are. The token, the intent and
// the fingerprint are compared in the UPDATE's WHERE clause, so that a concurrent claim wins
// or loses as a whole. It returns keystore.ErrNotFound if the record does not exist; an error
// wrapping keystore.ErrInvalid if rec is invalid (see Create) or changes Intent or
// Fingerprint; a *keystore.FencedError if its Fence is not the stored one (another instance
// claimed the record); keystore.ErrClosed after Close; or the database's error.
func (s *Store) Update(ctx context.Context, rec *keystore.Record) error {
	return s.update(ctx, rec, "")
}

// UpdateFromState is Update, done only while the stored record's state is from
// (keystore.StateGuardedUpdater), checked in the same statement; otherwise it writes nothing
// and returns an error wrapping keystore.ErrStateChanged.
func (s *Store) UpdateFromState(ctx context.Context, rec *keystore.Record, from keystore.State) error {
	if !from.Valid() {
		return fmt.Errorf("%w: UpdateFromState from state %q", keystore.ErrInvalid, from)
	}
	return s.update(ctx, rec, from)
}

// update is Update, and UpdateFromState when from is set.
func (s *Store) update(ctx context.Context, rec *keystore.Record, from keystore.State) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	r, stored, err := encode(rec, s.secret)
	if err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE idem_records SET
		method = $6, url = $7, request_header = $8, request_body = $9, state = $10,
		attempts = $11, last_status = $12, reason = $13, not_executed = $14, error = $15,
		response_status = $16, response_header = $17, response_body = $18,
		created_ns = $19, updated_ns = $20, note = $21
		WHERE tenant = $1 AND key = $2 AND fence = $3
		AND intent IS NOT DISTINCT FROM $4 AND fingerprint = $5
		AND ($22 = '' OR state = $22)`,
		r.tenant, r.key, r.fence, r.intent, r.fingerprint,
		r.method, r.url, r.reqHeader, r.reqBody, r.state,
		r.attempts, r.lastStatus, r.reason, r.notExecuted, r.errText,
		r.respStatus, r.respHeader, r.respBody, r.createdNs, r.updatedNs, r.note, string(from))
	if err != nil {
		return dbErr(ctx, "update", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	// Nothing matched: say why. Intent, fingerprint and a superseded fence never change back,
	// so what this read finds explains the refusal.
	cur, err := s.getOne(ctx, `SELECT `+columns+` FROM idem_records WHERE tenant = $1 AND key = $2`, r.tenant, r.key)
	if err != nil {
		return err
	}
	if err := keystore.CheckImmutable(cur, stored); err != nil {
		return err
	}
	if from != "" && cur.State != from {
		return keystore.StateChanged(cur.State, from)
	}
	return &keystore.FencedError{Scope: cur.Scope, Key: cur.Key, Fence: stored.Fence, Current: cur.Fence, Owner: cur.Owner}
}

// List returns the records in any of states (every record if none is given), sorted by
// CreatedAt, then Key, then Scope (bytewise, as keystore.SortRecords). It returns ErrCorrupt,
// keystore.ErrClosed, or the database's error.
func (s *Store) List(ctx context.Context, states ...keystore.State) ([]*keystore.Record, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	sql := `SELECT ` + columns + ` FROM idem_records`
	var args []any
	if len(states) > 0 {
		names := make([]string, len(states))
		for i, st := range states {
			names[i] = string(st)
		}
		sql += ` WHERE state = ANY($1)`
		args = append(args, names)
	}
	return s.query(ctx, sql+` ORDER BY created_ns, key, tenant`, args...)
}

// query runs a statement that returns records, in the order it returns them.
func (s *Store) query(ctx context.Context, sql string, args ...any) ([]*keystore.Record, error) {
	out, _, err := s.queryRows(ctx, false, sql, args...)
	return out, err
}

// queryRows is query that, with skipCorrupt, leaves out the rows that do not decode
// (ErrCorrupt) instead of failing on them; n counts every row, skipped ones included.
func (s *Store) queryRows(ctx context.Context, skipCorrupt bool, sql string, args ...any) (out []*keystore.Record, n int, err error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, 0, dbErr(ctx, "query", err)
	}
	defer rows.Close()
	out = []*keystore.Record{}
	for rows.Next() {
		n++
		rec, err := scanRecord(rows)
		if err != nil {
			if errors.Is(err, ErrCorrupt) {
				if skipCorrupt {
					continue
				}
				return nil, n, err
			}
			return nil, n, dbErr(ctx, "scan", err)
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, n, dbErr(ctx, "query", err)
	}
	return out, n, nil
}

// Purge deletes the terminal records (succeeded, failed) whose UpdatedAt is before cutoff,
// intents with them, and returns how many it deleted. It returns an error wrapping
// keystore.ErrInvalid for a cutoff outside 1678-2261, keystore.ErrClosed, or the database's
// error.
func (s *Store) Purge(ctx context.Context, cutoff time.Time) (int, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	n, err := nanos("cutoff", cutoff)
	if err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM idem_records
		WHERE state IN ('succeeded', 'failed') AND updated_ns < $1`, n)
	if err != nil {
		return 0, dbErr(ctx, "purge", err)
	}
	return int(tag.RowsAffected()), nil
}

// Now returns the database's clock (SELECT now()): the one clock every instance sharing the
// database can compare its own with (keystore.Clock). It returns keystore.ErrClosed after
// Close, ctx.Err(), or the database's error.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	if err := s.begin(ctx); err != nil {
		return time.Time{}, err
	}
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return time.Time{}, dbErr(ctx, "reading the clock", err)
	}
	return now, nil
}
