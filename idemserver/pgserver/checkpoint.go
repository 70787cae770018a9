package pgserver

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/jackc/pgx/v5"
)

// A checkpoint commits the claim's work so far and opens the next phase; a later request
// takes over a checkpointed key whose owner died.

// Checkpoint commits the phase (the handler's writes and the recovery point) and opens the
// next phase's transaction on the same connection, under the same advisory lock. An empty
// point is refused (idemserver.ErrEmptyRecoveryPoint) before anything is sent: the handler's
// transaction stays open as it was.
func (c *claim) Checkpoint(ctx context.Context, point string, now time.Time, lease time.Duration) error {
	if point == "" { // before take, which would end the handler's use of the transaction
		return fmt.Errorf("pgserver: checkpoint: %w", idemserver.ErrEmptyRecoveryPoint)
	}
	held := c.take(true) // the handler asks Tx again for the next phase's
	defer c.give(held)
	if !held {
		return fmt.Errorf("pgserver: checkpoint: %w", errAbandoned)
	}
	if c.tx == nil {
		return idemserver.ErrNotOwner
	}
	if c.handlerEnded() {
		c.giveUpEnded(ctx, true)
		return fmt.Errorf("pgserver: checkpoint: %w", ErrTxEnded)
	}
	if err := c.failed(); err != nil {
		c.end(ctx) // rolls the phase back
		return fmt.Errorf("pgserver: checkpoint: %w", err)
	}
	if _, err := c.tx.Exec(ctx, sameTxGuard, c.xid); isDivisionByZero(err) {
		c.giveUpEnded(ctx, true) // ended, and another transaction begun on the connection
		return fmt.Errorf("pgserver: checkpoint: %w", ErrTxEnded)
	} else if err != nil {
		c.end(ctx)
		return fmt.Errorf("pgserver: checkpoint: %w", err)
	}
	s := c.scope
	if _, err := c.tx.Exec(ctx, fmt.Sprintf(ownedUpdate, "recovery_point = $5, locked_until = $6"),
		s.Tenant, s.Operation, s.Key, c.owner, point, now.Add(lease)); err != nil {
		c.end(ctx)
		if isDivisionByZero(err) {
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
	if err := c.nextPhase(ctx); err != nil {
		c.end(ctx)
		return fmt.Errorf("pgserver: checkpoint: next phase: %w", err)
	}
	return nil
}

// nextPhase begins the transaction of the handler's next phase on the claim's connection, whose
// previous transaction has committed, and hands it to the handler (open). The session-level
// lock kept the key meanwhile; the transaction-level one is taken again (at once: this session
// holds the key) so that PREPARE stays refused, and the new transaction's id is what Complete
// checks. Two round trips. On error the caller ends the claim.
func (c *claim) nextPhase(ctx context.Context) error {
	tx, err := c.pc.Begin(ctx)
	if err != nil {
		return err
	}
	c.tx = tx
	if err := tx.QueryRow(ctx, "SELECT pg_advisory_xact_lock($1), pg_current_xact_id()::text", c.lock).Scan(nil, &c.xid); err != nil {
		return err
	}
	c.txN++
	c.open.Store(c.txN)
	return nil
}

// takeOver makes the claim, whose transaction holds the key's locks and the row (FOR UPDATE),
// the owner of a checkpointed row whose owner is gone, with locked_until = lockedUntil, and
// commits that on its own, durably (synchronous_commit on), before the handler's phase begins
// in a new transaction (nextPhase). Written in the phase's transaction, the takeover was
// undone by the resumer's death, which restored the first owner's past lease: the next retry
// resumed at once, while the dead resumer's third-party call might still be settling. Now a
// takeover's death leaves the key in progress until its own lease passes, as a checkpoint's
// does. The session-level lock keeps the key between the two transactions. One round trip
// (the UPDATE, SET LOCAL and COMMIT pipelined), then nextPhase's two. On error the caller
// releases the connection (releaseConn); if the commit went through, the key stays in
// progress until lockedUntil.
func (c *claim) takeOver(ctx context.Context, lockedUntil time.Time) error {
	s := c.scope
	batch := &pgx.Batch{}
	batch.Queue(`UPDATE idem_server_keys SET owner = $4, locked_until = $5
		WHERE tenant = $1 AND operation = $2 AND key = $3`, s.Tenant, s.Operation, s.Key, c.owner, lockedUntil)
	batch.Queue("SET LOCAL synchronous_commit TO on") // see Complete
	batch.Queue("COMMIT")
	br := c.tx.SendBatch(ctx, batch)
	tag, err := br.Exec()
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("takeover updated %d rows, want 1", tag.RowsAffected())
	}
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	c.tx = nil // ended by the batch's COMMIT (or to be rolled back by releaseConn): the pgx.Tx must not send its own
	if err != nil {
		return fmt.Errorf("takeover: %w", err)
	}
	if tag.String() != "COMMIT" || c.pc.Conn().PgConn().TxStatus() != 'I' {
		return fmt.Errorf("takeover: not committed (%s)", tag)
	}
	return c.nextPhase(ctx)
}
