package pgserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// claim is a key held by one request: its connection and transaction, holding the advisory
// lock.
type claim struct {
	b         *Backend
	scope     idemserver.Scope
	pc        *pgxpool.Conn // nil once released to the pool
	tx        pgx.Tx        // nil once committed or rolled back
	owner     string
	point     string
	expired   bool
	committed bool // a checkpoint committed the row: a rollback leaves it processing
	fp        []byte
	created   time.Time
	ended     bool // the handler ended the claim's transaction itself: its writes may stand
	refuse    bool // ended by a Checkpoint's check: the next Complete (the handler's answer) is refused
}

// ErrTxEnded is returned by Complete and Checkpoint when the handler ended the claim's
// transaction itself (a BEGIN and COMMIT or ROLLBACK through the connection, or the SQL
// sent through the transaction): its writes may have committed on their own, and the claim's
// lock is gone. The claim no longer rolls back (RollsBack is false), and the middleware
// stores a 500 "effect unknown" for the key instead of the answer.
var ErrTxEnded = errors.New("pgserver: the handler ended the claim's transaction itself; its writes may stand")

// handlerEnded reports whether the claim's transaction is no longer open on its connection.
func (c *claim) handlerEnded() bool {
	return c.pc != nil && c.pc.Conn().PgConn().TxStatus() == 'I'
}

// giveUpEnded marks the claim ended by the handler and gives its connection back. refuse:
// the next Complete returns ErrTxEnded (the handler's answer, after a Checkpoint that found
// the transaction ended, must not be stored: the middleware then stores its 500).
func (c *claim) giveUpEnded(refuse bool) {
	c.ended, c.refuse, c.tx = true, refuse, nil // nothing is open: the pgx.Tx must not send its own ROLLBACK
	if c.pc != nil {
		c.pc.Release()
		c.pc = nil
	}
}

func (c *claim) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}
func (c *claim) RecoveryPoint() string { return c.point }
func (c *claim) ExpiredReuse() bool    { return c.expired }

// ownedUpdate updates the claim's row, and fails (division by zero) unless exactly that row
// changed: the claim lost the key, so nothing of its transaction may commit. An error, unlike
// a row count, also stops a COMMIT pipelined behind it.
const ownedUpdate = `WITH u AS (UPDATE idem_server_keys SET %s
	WHERE tenant = $1 AND operation = $2 AND key = $3 AND owner = $4 RETURNING 1)
	SELECT 1 / (SELECT count(*)::int FROM u)`

// divisionByZero is the SQLSTATE ownedUpdate raises when the claim lost its row.
const divisionByZero = "22012"

// end rolls back what is open and gives the connection back (a connection left inside a
// transaction is closed by the pool, which rolls it back).
func (c *claim) end(ctx context.Context) {
	if c.tx != nil {
		_ = c.tx.Rollback(context.WithoutCancel(ctx))
		c.tx = nil
	}
	if c.pc != nil {
		c.pc.Release()
		c.pc = nil
	}
}

// Checkpoint commits the phase (the handler's writes and the recovery point) and opens the
// next phase's transaction on the same connection, under the same advisory lock.
func (c *claim) Checkpoint(ctx context.Context, point string, now time.Time, lease time.Duration) error {
	if c.tx == nil {
		return idemserver.ErrNotOwner
	}
	if c.handlerEnded() {
		c.giveUpEnded(true)
		return fmt.Errorf("pgserver: checkpoint: %w", ErrTxEnded)
	}
	s := c.scope
	if _, err := c.tx.Exec(ctx, fmt.Sprintf(ownedUpdate, "recovery_point = $5, locked_until = $6"),
		s.Tenant, s.Operation, s.Key, c.owner, point, now.Add(lease)); err != nil {
		c.end(ctx)
		if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == divisionByZero {
			err = idemserver.ErrNotOwner
		}
		return fmt.Errorf("pgserver: checkpoint: %w", err)
	}
	if _, err := c.tx.Exec(ctx, "SET LOCAL synchronous_commit TO on"); err != nil { // see Complete
		c.end(ctx)
		return fmt.Errorf("pgserver: checkpoint: %w", err)
	}
	err := c.tx.Commit(ctx)
	c.tx = nil
	if err != nil {
		c.end(ctx)
		return fmt.Errorf("pgserver: checkpoint commit: %w", err)
	}
	c.committed, c.point = true, point
	tx, err := c.pc.Begin(ctx)
	if err != nil {
		c.end(ctx)
		return fmt.Errorf("pgserver: checkpoint: next phase: %w", err)
	}
	c.tx = tx
	// Wait for the lock: another request may hold it for the instant it takes to see the
	// fresh locked_until and answer 409.
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockID(c.scope)); err != nil {
		c.end(ctx)
		return fmt.Errorf("pgserver: checkpoint: next phase: %w", err)
	}
	return nil
}

// Complete writes the answer into the row and commits it with the handler's writes, in one
// round trip (the UPDATE, SET LOCAL synchronous_commit and COMMIT pipelined).
func (c *claim) Complete(ctx context.Context, resp *idemserver.Response, now, expires time.Time) error {
	if c.ended {
		if c.refuse {
			c.refuse = false
			return fmt.Errorf("pgserver: complete: %w", ErrTxEnded)
		}
		return c.completeEnded(ctx, resp, now, expires)
	}
	if c.tx == nil {
		return idemserver.ErrNotOwner
	}
	if c.handlerEnded() {
		c.giveUpEnded(false)
		return fmt.Errorf("pgserver: complete: %w", ErrTxEnded)
	}
	defer c.end(ctx)
	header, body, err := answerColumns(resp)
	if err != nil {
		return fmt.Errorf("pgserver: complete: %w", err)
	}
	s := c.scope
	batch := &pgx.Batch{}
	batch.Queue(fmt.Sprintf(ownedUpdate, "state = 2, owner = NULL, expires_at = $5, response_status = $6, response_header = $7, response_body = $8"),
		s.Tenant, s.Operation, s.Key, c.owner, expires, resp.StatusCode, header, body)
	// The client is told of the payment once this commits: a commit PostgreSQL acknowledges
	// before its WAL is written (synchronous_commit off, by the session's default or the
	// handler's SET LOCAL) could vanish in a crash with the charge it confirmed.
	batch.Queue("SET LOCAL synchronous_commit TO on")
	batch.Queue("COMMIT")
	br := c.tx.SendBatch(ctx, batch)
	_, err = br.Exec()
	if err == nil {
		_, err = br.Exec() // SET LOCAL
	}
	var tag string
	if err == nil {
		var ct pgconn.CommandTag
		ct, err = br.Exec()
		tag = ct.String()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == divisionByZero {
		return fmt.Errorf("pgserver: complete: %w", idemserver.ErrNotOwner)
	}
	if err != nil {
		return fmt.Errorf("pgserver: complete: %w", err)
	}
	if tag != "COMMIT" { // "ROLLBACK": the transaction had failed before
		return fmt.Errorf("pgserver: complete: transaction rolled back (%s)", tag)
	}
	// COMMIT went through the batch: the pgx.Tx must not send its own. The connection is
	// idle again and goes back to the pool.
	c.tx = nil
	return nil
}

// RollsBack reports true: Release rolls back the handler's writes of this phase with the
// claim (idemserver.RollbackClaim), so a handler that panics leaves no work behind. False
// once the handler ended the transaction itself (ErrTxEnded): nothing undoes its writes then.
func (c *claim) RollsBack() bool { return !c.ended && !c.handlerEnded() }

// completeEnded stores resp for a claim whose transaction the handler ended (the middleware's
// 500 "effect unknown"), in a transaction of its own: the row is inserted if the handler's
// rollback took it away, or completed if this claim still owns it; a row another request
// has claimed since is left to it (ErrNotOwner).
func (c *claim) completeEnded(ctx context.Context, resp *idemserver.Response, now, expires time.Time) error {
	header, body, err := answerColumns(resp)
	if err != nil {
		return fmt.Errorf("pgserver: complete: %w", err)
	}
	s := c.scope
	tx, err := c.b.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgserver: complete: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	tag, err := tx.Exec(ctx, `INSERT INTO idem_server_keys (tenant, operation, key, fingerprint, state, owner, created_at,
			locked_until, expires_at, response_status, response_header, response_body)
		VALUES ($1, $2, $3, $4, 2, NULL, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (tenant, operation, key) DO UPDATE SET state = 2, owner = NULL, expires_at = EXCLUDED.expires_at,
			response_status = EXCLUDED.response_status, response_header = EXCLUDED.response_header,
			response_body = EXCLUDED.response_body
		WHERE idem_server_keys.owner = $11`,
		s.Tenant, s.Operation, s.Key, c.fp, c.created, now, expires, resp.StatusCode, header, body, c.owner)
	if err != nil {
		return fmt.Errorf("pgserver: complete: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("pgserver: complete: %w", idemserver.ErrNotOwner)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit TO on"); err != nil {
		return fmt.Errorf("pgserver: complete: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgserver: complete: %w", err)
	}
	return nil
}

// Release rolls back: the claim (and the handler's writes of this phase) vanish; a row a
// checkpoint committed stays processing until its lease passes.
func (c *claim) Release(ctx context.Context) error {
	if c.tx == nil {
		c.end(ctx)
		return idemserver.ErrNotOwner
	}
	err := c.tx.Rollback(context.WithoutCancel(ctx))
	c.tx = nil
	c.end(ctx)
	if err != nil {
		return fmt.Errorf("pgserver: release: %w", err)
	}
	return nil
}

// answerColumns is resp's header and body as the row stores them.
func answerColumns(resp *idemserver.Response) (header, body []byte, err error) {
	header, err = encodeHeader(resp.Header)
	body = resp.Body
	if body == nil {
		body = []byte{}
	}
	return header, body, err
}
