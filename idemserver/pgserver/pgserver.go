package pgserver

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Backend is the PostgreSQL idemserver.Backend. Create it with New or NewWithOptions after
// Migrate.
type Backend struct {
	pool    *pgxpool.Pool
	maxSkew time.Duration // < 0: no clock check
}

// Options configures a Backend (NewWithOptions). The zero value is New's configuration.
type Options struct {
	// MaxClockSkew is how far the middleware's clock (idemserver.Config.Now, as passed to
	// Claim, Lookup and Purge) may be from the database's (clock_timestamp()) before they
	// refuse with a *ClockSkewError (ErrClockSkew): 0 means DefaultMaxClockSkew; a negative
	// value turns the check off (for tests whose injected clock is far from real time; never
	// in a fleet). Keep it well below idemserver.Config.Lease and Config.Retention: an
	// instance up to MaxClockSkew ahead may take over a checkpointed row that much early.
	MaxClockSkew time.Duration
}

// DefaultMaxClockSkew is Options.MaxClockSkew when it is 0, as the idem client's
// DefaultMaxClockSkew: NTP keeps hosts within milliseconds, so 5 s never refuses a healthy
// fleet, and it is small beside the lease (90 s by default) and the retention (24 h).
const DefaultMaxClockSkew = 5 * time.Second

// New returns a Backend on pool with the default Options. The pool's search_path must reach
// the table Migrate made.
func New(pool *pgxpool.Pool) *Backend { return NewWithOptions(pool, Options{}) }

// NewWithOptions returns a Backend on pool configured by o (zero fields take their
// defaults). The pool's search_path must reach the table Migrate made.
func NewWithOptions(pool *pgxpool.Pool, o Options) *Backend {
	if o.MaxClockSkew == 0 {
		o.MaxClockSkew = DefaultMaxClockSkew
	}
	return &Backend{pool: pool, maxSkew: o.MaxClockSkew}
}

// ErrNoTx is returned by MustTx for a context that carries no claim transaction: the request
// did not go through a middleware whose Backend is this package's (idemserver.Config.Backend
// = pgserver.New(pool)), or carried no key.
var ErrNoTx = errors.New("pgserver: no claim transaction in context (is the middleware's Backend pgserver.New(pool)?)")

type ctxKey struct{}

// ErrTxOwned is what Commit and Rollback of the transaction Tx returns give: it belongs to
// the middleware, which commits the handler's writes together with the stored answer (or
// rolls both back). Committed by the handler, the writes would stand with the key still
// "processing", and after the lease another request would run the handler again. Nothing is
// done to the transaction. Savepoints (its Begin) commit and roll back as usual.
var ErrTxOwned = errors.New("pgserver: the claim's transaction is committed by the middleware, with the stored answer; do not Commit or Rollback it")

// Tx returns the transaction of the claim that ctx (a request's context under the middleware)
// carries, in which the handler does its business writes; ok is false outside a claim. After
// idemserver.Checkpoint it is a new transaction: ask again instead of keeping the old one.
// Its Commit and Rollback return ErrTxOwned and do nothing. Never begin a transaction on its
// Conn (PostgreSQL has no nested BEGIN: that transaction's end would be the claim's); its Begin
// makes a savepoint. A handler that ends the claim's transaction anyway (through Conn, or SQL
// "COMMIT" or "ROLLBACK", then perhaps "BEGIN" again) makes the key keep a 500 "effect
// unknown" (ErrTxEnded): nothing can tell which of its writes stand. The key's session-level
// lock keeps retries out (409) until that 500 is stored, unless the claim's connection is
// lost while such a handler still runs: the lock goes with it, and a retry may then run the
// handler again. pgx closes a connection whose query's context ends: a handler whose queries
// use the request's context loses the claim when the client goes away mid-query (all its
// writes roll back and the key is free, which is right for writes only); work that cannot
// roll back belongs after a Checkpoint, as above. A statement that fails through the Tx, its
// savepoints, rows or batches, even without reaching PostgreSQL (its context already done,
// say), fails the claim's transaction as PostgreSQL's own errors abort it: the next
// Checkpoint or the answer's storing rolls back instead of committing, and the middleware
// answers 503 (ErrStatementFailed); a failure in a savepoint is undone by rolling it back.
// PREPARE TRANSACTION is refused by PostgreSQL (the claim holds the key's lock at both
// levels) and rolls the transaction back.
// Not detected: a handler that ends the claim's transaction, begins another, and leaves that
// one aborted (a failed statement) looks like the claim's own aborted transaction, which
// gets 503 and runs again on a retry. Once the claim's transaction ends (its answer stored,
// the claim released, a checkpoint), the Tx, its savepoints, rows and batches return an error
// wrapping pgx.ErrTxClosed and send nothing (a failure: after a checkpoint, it fails the next
// phase), and its Conn is nil: the connection then serves other requests. A statement in
// flight when the answer comes to be stored (a goroutine the handler left, an inner handler
// still running after http.TimeoutHandler answered) finishes first, and the claim's
// transaction is then rolled back (ErrHandlerStillRunning); see Timeouts above.
func Tx(ctx context.Context) (tx pgx.Tx, ok bool) {
	c, _ := ctx.Value(ctxKey{}).(*claim)
	if c == nil {
		return nil, false
	}
	id := c.open.Load()
	if id == 0 {
		return nil, false
	}
	return &handlerTx{c: c, id: id}, true
}

// MustTx is Tx with an error (ErrNoTx) instead of ok.
func MustTx(ctx context.Context) (pgx.Tx, error) {
	if tx, ok := Tx(ctx); ok {
		return tx, nil
	}
	return nil, ErrNoTx
}

// lockID is the advisory lock of a scope: 64 bits of SHA-256. A collision only makes two
// keys wait for each other.
func lockID(s idemserver.Scope) int64 {
	h := sha256.New()
	for _, p := range []string{s.Tenant, s.Operation, s.Key} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return int64(binary.BigEndian.Uint64(h.Sum(nil)))
}

const selectRow = `SELECT fingerprint, state, recovery_point, owner, created_at, locked_until, expires_at,
	response_status, response_header, response_body FROM idem_server_keys
	WHERE tenant = $1 AND operation = $2 AND key = $3`

type row struct {
	rec   idemserver.Record
	owner *string
}

// scanRow reads selectRow's row, nil when there is none.
func scanRow(r pgx.Row) (*row, error) {
	var n nullableRow
	err := r.Scan(n.dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return n.row()
}

// Lookup implements idemserver.Backend. A key whose advisory lock is held (a claim in flight)
// is processing; it reads pg_locks instead of taking the lock, so it never makes a claim 409.
func (b *Backend) Lookup(ctx context.Context, s idemserver.Scope, now time.Time) (*idemserver.Record, error) {
	id := uint64(lockID(s))
	var (
		held bool
		db   time.Time
	)
	start := time.Now()
	err := b.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND database =
		(SELECT oid FROM pg_database WHERE datname = current_database()) AND classid = $1 AND objid = $2 AND objsubid = 1 AND granted),
		clock_timestamp()`,
		uint32(id>>32), uint32(id)).Scan(&held, &db)
	if err != nil {
		return nil, fmt.Errorf("pgserver: lookup: %w", err)
	}
	if err := b.checkClock("lookup", now, now.Add(time.Since(start)), db); err != nil {
		return nil, err
	}
	cur, err := scanRow(b.pool.QueryRow(ctx, selectRow, s.Tenant, s.Operation, s.Key))
	if err != nil {
		return nil, fmt.Errorf("pgserver: lookup: %w", err)
	}
	expired := cur != nil && cur.rec.State == idemserver.StateCompleted && !now.Before(cur.rec.ExpiresAt)
	switch {
	case held && cur != nil && cur.rec.State != idemserver.StateCompleted:
		return &cur.rec, nil
	case held && (cur == nil || expired): // a claim in flight, maybe reusing an expired key
		return &idemserver.Record{State: idemserver.StateProcessing}, nil
	case cur == nil, expired:
		return nil, nil
	}
	return &cur.rec, nil
}

// Purge implements idemserver.Backend: one DELETE of at most limit expired rows, skipping rows
// a claim is replacing. Unless Options.MaxClockSkew < 0, it first reads the database's clock
// (one more round trip, off the request path) and deletes nothing, returning a
// *ClockSkewError, when now is further from it than MaxClockSkew.
func (b *Backend) Purge(ctx context.Context, now time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	if b.maxSkew >= 0 {
		start := time.Now()
		var db time.Time
		if err := b.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&db); err != nil {
			return 0, fmt.Errorf("pgserver: purge: reading the database's clock: %w", err)
		}
		if err := b.checkClock("purge", now, now.Add(time.Since(start)), db); err != nil {
			return 0, err
		}
	}
	tag, err := b.pool.Exec(ctx, `DELETE FROM idem_server_keys WHERE ctid IN (SELECT ctid FROM idem_server_keys
		WHERE state = 2 AND expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)`, now, limit)
	if err != nil {
		return 0, fmt.Errorf("pgserver: purge: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// skewMargin is how far two middlewares' clocks may be apart when each passes the clock check:
// twice MaxClockSkew (twice DefaultMaxClockSkew with the check off).
func (b *Backend) skewMargin() time.Duration {
	if b.maxSkew > 0 {
		return 2 * b.maxSkew
	}
	return 2 * DefaultMaxClockSkew
}

// lockNotAvailable is the SQLSTATE of FOR UPDATE NOWAIT on a row another transaction holds.
const lockNotAvailable = "55P03"

func newOwner() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var _ idemserver.Backend = (*Backend)(nil)
