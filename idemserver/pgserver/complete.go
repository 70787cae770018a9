package pgserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The end of a claim: its answer stored and committed with the handler's writes, or the
// claim released.

// ErrHandlerStillRunning is returned by the claim's Complete when a statement of the handler's
// Tx still held the claim's connection as the middleware came to store the answer: the
// handler had returned while part of it went on, in an http.TimeoutHandler inside the
// middleware (which answers at its deadline while the handler runs on in its goroutine) or
// in a goroutine it left behind. The answer cannot account for that work, so once the
// statement ends (or is cancelled, after a few seconds) the claim's transaction is rolled
// back: the middleware answers 503 with Retry-After, stores nothing, and a retry runs the
// handler again. A handler caught between two statements is not detected: put timeouts
// outside the middleware (see the package documentation).
var ErrHandlerStillRunning = errors.New("pgserver: a statement of the handler was still running when its answer came to be stored (http.TimeoutHandler inside the middleware, or a goroutine the handler left); the claim's transaction is rolled back")

// completeSQL stores the answer in the claim's row, in one statement that fails unless it may
// commit, so that the COMMIT pipelined behind it is skipped (PostgreSQL skips a pipeline's
// messages after an error, up to its Sync) and the transaction rolled back. In order:
//
//   - the open transaction must be the claim's ($9, its id): else the handler ended the
//     claim's and began another, and the statement fails with txEndedMark (ErrTxEnded);
//   - the UPDATE must have changed exactly the claim's row (owner $4): else the claim lost
//     the key, and it fails with division by zero (idemserver.ErrNotOwner);
//   - then, and only then, synchronous_commit is set on for this transaction (SET LOCAL: the
//     client is told of the payment once this commits, and a commit PostgreSQL acknowledged
//     before its WAL was written, by the session's default or the handler's SET LOCAL, could
//     vanish in a crash with the charge it confirmed), and the session-level lock is dropped
//     (its result: true). The transaction-level lock keeps the key until the COMMIT.
//
// CASE evaluates its branches in order and each failure is computed from values read at run
// time, so that the planner cannot fold one into an error raised before the checks.
const completeSQL = `WITH u AS (
	UPDATE idem_server_keys SET state = 2, owner = NULL, expires_at = $5, response_status = $6, response_header = $7, response_body = $8
	WHERE tenant = $1 AND operation = $2 AND key = $3 AND owner = $4 RETURNING 1
)
SELECT CASE
	WHEN pg_current_xact_id_if_assigned()::text IS DISTINCT FROM $9 THEN ('` + txEndedMark + ` ' || clock_timestamp())::int = 0
	WHEN 1 / ((SELECT count(*) FROM u) = 1)::int = 1 THEN set_config('synchronous_commit', 'on', true) = 'on' AND pg_advisory_unlock($10)
END`

// txEndedMark is in the error completeSQL raises when the open transaction is not the
// claim's (invalid_text_representation, its value quoted in the message).
const txEndedMark = "pgserver: claim transaction ended"

// isTxEnded reports the error completeSQL raises for a transaction that is not the claim's.
func isTxEnded(err error) bool {
	pe := (*pgconn.PgError)(nil)
	return errors.As(err, &pe) && pe.Code == invalidTextRepresentation && strings.Contains(pe.Message, txEndedMark)
}

// invalidTextRepresentation is the SQLSTATE of completeSQL's txEndedMark.
const invalidTextRepresentation = "22P02"

// Complete writes the answer into the row and commits it with the handler's writes: two
// statements in one round trip (completeSQL and COMMIT, pipelined). It rolls back instead
// when a statement of the handler was still running as it began (ErrHandlerStillRunning) or
// one failed (ErrStatementFailed).
func (c *claim) Complete(ctx context.Context, resp *idemserver.Response, now, expires time.Time) error {
	held, busy := c.takeBusy(true)
	defer c.give(held)
	if !held {
		return fmt.Errorf("pgserver: complete: %w", errAbandoned)
	}
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
		c.giveUpEnded(ctx, false)
		return fmt.Errorf("pgserver: complete: %w", ErrTxEnded)
	}
	if busy {
		c.end(ctx) // rolls back: nothing of the phase is stored
		return fmt.Errorf("pgserver: complete: %w", ErrHandlerStillRunning)
	}
	if err := c.failed(); err != nil {
		c.end(ctx) // rolls back: nothing of the phase is stored
		return fmt.Errorf("pgserver: complete: %w", err)
	}
	header, body, err := answerColumns(resp)
	if err != nil {
		c.end(ctx)
		return fmt.Errorf("pgserver: complete: %w", err)
	}
	s := c.scope
	batch := &pgx.Batch{}
	batch.Queue(completeSQL, s.Tenant, s.Operation, s.Key, c.owner, expires, resp.StatusCode, string(header), body, c.xid, c.lock) // header as text: jsonb takes no bytea
	batch.Queue("COMMIT")
	br := c.tx.SendBatch(ctx, batch)
	var unlocked *bool
	guardErr := br.QueryRow().Scan(&unlocked)
	err = guardErr
	var tag string
	if err == nil {
		var ct pgconn.CommandTag
		ct, err = br.Exec()
		tag = ct.String()
	}
	committed := err == nil && tag == "COMMIT"
	if cerr := br.Close(); err == nil && !committed {
		err = cerr
	}
	if isTxEnded(guardErr) { // the handler ended the claim's transaction and began another
		c.giveUpEnded(ctx, false)
		return fmt.Errorf("pgserver: complete: %w", ErrTxEnded)
	}
	if committed && unlocked != nil && *unlocked && c.pc.Conn().PgConn().TxStatus() == 'I' {
		// Committed and unlocked through the batch: the pgx.Tx must not send its own
		// ROLLBACK, and the connection goes back to the pool as it is.
		c.tx = nil
		c.pc.Release()
		c.pc = nil
		return nil
	}
	c.end(ctx) // rolls back what is open and unlocks, or closes the connection
	switch {
	case committed:
		return nil
	case isDivisionByZero(err):
		return fmt.Errorf("pgserver: complete: %w", idemserver.ErrNotOwner)
	case err != nil:
		return fmt.Errorf("pgserver: complete: %w", err)
	}
	return fmt.Errorf("pgserver: complete: transaction rolled back (%s)", tag) // it had failed before
}

// RollsBack reports true: Release rolls back the handler's writes of this phase with the
// claim (idemserver.RollbackClaim), so a handler that panics leaves no work behind. False
// once the handler ended the transaction itself (ErrTxEnded): nothing undoes its writes then.
// A transaction open on the connection is asked for its id once (one round trip, on the
// paths that free a key: a panic, "not executed", a failed store): the handler may have
// ended the claim's and begun another. If it cannot be asked (an aborted transaction, a
// lost connection), the claim's own is assumed, as the connection's status says.
func (c *claim) RollsBack() bool {
	held := c.take(false)
	defer c.give(held)
	if !held {
		return true // the closed connection rolled the transaction back
	}
	if c.ended {
		return false
	}
	if c.handlerEnded() {
		return false
	}
	if c.pc != nil && c.tx != nil && !c.checked && c.pc.Conn().PgConn().TxStatus() == 'T' {
		c.checked = true
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		var xid *string
		if err := c.pc.Conn().QueryRow(ctx, "SELECT pg_current_xact_id_if_assigned()::text").Scan(&xid); err == nil &&
			(xid == nil || *xid != c.xid) {
			c.giveUpEnded(ctx, false)
			return false
		}
	}
	return true
}

// completeEnded stores resp for a claim whose transaction the handler ended (the middleware's
// 500 "effect unknown") in a transaction of its own: the row is inserted if the handler's
// rollback took it away, or overwritten unless it is another request's live answer
// (ErrNotOwner; see storeEnded). It tries the claim's own connection first, whose
// session-level lock keeps every retry out; if that fails with the connection alive (the
// handler may have left its session read-only, say), it tries through the pool while that
// lock is still held; if the connection is lost, through the pool under the key's lock. The
// claim's connection is then closed, never pooled: the handler may have changed its session.
func (c *claim) completeEnded(ctx context.Context, resp *idemserver.Response, now, expires time.Time) error {
	header, body, err := answerColumns(resp)
	if err != nil {
		return fmt.Errorf("pgserver: complete: %w", err)
	}
	store := func(begin func(context.Context) (pgx.Tx, error), lockHeld bool) error {
		tx, err := begin(ctx)
		if err != nil {
			return err
		}
		return c.storeEnded(ctx, tx, lockHeld, resp.StatusCode, header, body, expires, now)
	}
	err = errors.New("the claim's connection is gone")
	if c.pc != nil && !c.pc.Conn().IsClosed() {
		err = store(c.pc.Begin, true)
		if err != nil && !errors.Is(err, idemserver.ErrNotOwner) && !c.pc.Conn().IsClosed() {
			err = store(c.b.pool.Begin, true) // this claim's connection still holds the key's lock
		}
	}
	if c.pc != nil {
		lockHeld := !c.pc.Conn().IsClosed()
		c.drop(ctx)
		if lockHeld { // the tries above ran under the lock and gave their verdict
			return wrapComplete(err)
		}
	}
	if err != nil && !errors.Is(err, idemserver.ErrNotOwner) {
		err = store(c.b.pool.Begin, false) // lost with its connection: take it again
	}
	return wrapComplete(err)
}

// wrapComplete is Complete's error, nil for nil.
func wrapComplete(err error) error {
	if err != nil {
		return fmt.Errorf("pgserver: complete: %w", err)
	}
	return nil
}

// drop closes the claim's connection (the key's lock goes with it) and hands it back to the
// pool, which discards it: a handler that ended the claim's transaction may have changed the
// session (a read-only default, a search_path), which the next request must not inherit.
func (c *claim) drop(ctx context.Context) {
	c.tx = nil
	c.open.Store(0)
	if c.pc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	_ = c.pc.Conn().Close(ctx)
	c.pc.Release()
	c.pc = nil
}

// storeEnded is completeEnded's transaction, rolled back unless it commits. It runs under the
// key's lock: held by the claim's connection (lockHeld), or taken here, where a request
// running the key now makes it ErrNotOwner. Under the lock, any row but a live answer is this claim's to overwrite:
// its own, or the one the handler's ROLLBACK restored (the expired answer a reuse replaced,
// the dead owner's checkpoint a takeover took), which the answer must replace, else the key
// would run again.
func (c *claim) storeEnded(ctx context.Context, tx pgx.Tx, lockHeld bool, status int, header, body []byte, expires, now time.Time) error {
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if !lockHeld {
		var locked bool
		if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", c.lock).Scan(&locked); err != nil {
			return err
		}
		if !locked { // another request runs the key now
			return idemserver.ErrNotOwner
		}
	}
	s := c.scope
	tag, err := tx.Exec(ctx, `INSERT INTO idem_server_keys (tenant, operation, key, fingerprint, state, owner, created_at,
			locked_until, expires_at, response_status, response_header, response_body)
		VALUES ($1, $2, $3, $4, 2, NULL, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (tenant, operation, key) DO UPDATE SET state = 2, owner = NULL, fingerprint = EXCLUDED.fingerprint,
			recovery_point = '', created_at = EXCLUDED.created_at, locked_until = EXCLUDED.locked_until,
			expires_at = EXCLUDED.expires_at, response_status = EXCLUDED.response_status,
			response_header = EXCLUDED.response_header, response_body = EXCLUDED.response_body
		WHERE idem_server_keys.owner = $11 OR idem_server_keys.state <> 2 OR idem_server_keys.expires_at <= $6`,
		s.Tenant, s.Operation, s.Key, c.fp, c.created, now, expires, status, string(header), body, c.owner)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 { // another request's live answer
		return idemserver.ErrNotOwner
	}
	if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit TO on"); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// Release rolls back: the claim (and the handler's writes of this phase) vanish; a row a
// checkpoint committed stays processing until its lease passes (the checkpoint's, or the
// takeover's when the claim resumed one).
func (c *claim) Release(ctx context.Context) error {
	held := c.take(true)
	defer c.give(held)
	if !held {
		return nil // the closed connection rolled the transaction back
	}
	if c.tx == nil {
		c.end(ctx)
		return idemserver.ErrNotOwner
	}
	c.end(ctx) // the ROLLBACK, the unlock; a connection that fails them is closed, which rolls back
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
