package pgserver

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/jackc/pgx/v5"
)

// claim is a key held by one request: its transaction, holding the advisory lock.
type claim struct {
	b         *Backend
	scope     idemserver.Scope
	tx        pgx.Tx // nil once committed or rolled back
	owner     string
	point     string
	expired   bool
	committed bool // a checkpoint committed the row: a rollback leaves it processing
}

func (c *claim) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}
func (c *claim) RecoveryPoint() string { return c.point }
func (c *claim) ExpiredReuse() bool    { return c.expired }

// own updates the claim's row if the claim still owns it; 0 rows means it lost the key.
func (c *claim) own(ctx context.Context, set string, args ...any) error {
	if c.tx == nil {
		return idemserver.ErrNotOwner
	}
	s := c.scope
	tag, err := c.tx.Exec(ctx, "UPDATE idem_server_keys SET "+set+" WHERE tenant = $1 AND operation = $2 AND key = $3 AND owner = $4",
		append([]any{s.Tenant, s.Operation, s.Key, c.owner}, args...)...)
	if err != nil {
		c.abort(ctx)
		return err
	}
	if tag.RowsAffected() != 1 {
		c.abort(ctx)
		return idemserver.ErrNotOwner
	}
	return nil
}

func (c *claim) abort(ctx context.Context) {
	if c.tx != nil {
		_ = c.tx.Rollback(context.WithoutCancel(ctx))
		c.tx = nil
	}
}

// Checkpoint commits the phase (the handler's writes and the recovery point) and opens the
// next phase's transaction under the same advisory lock.
func (c *claim) Checkpoint(ctx context.Context, point string, now time.Time, lease time.Duration) error {
	if err := c.own(ctx, "recovery_point = $5, locked_until = $6", point, now.Add(lease)); err != nil {
		return fmt.Errorf("pgserver: checkpoint: %w", err)
	}
	err := c.tx.Commit(ctx)
	c.tx = nil
	if err != nil {
		return fmt.Errorf("pgserver: checkpoint commit: %w", err)
	}
	c.committed, c.point = true, point
	tx, err := c.b.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgserver: checkpoint: next phase: %w", err)
	}
	// Wait for the lock: another request may hold it for the instant it takes to see the
	// fresh locked_until and answer 409.
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockID(c.scope)); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return fmt.Errorf("pgserver: checkpoint: next phase: %w", err)
	}
	c.tx = tx
	return nil
}

// Complete writes the answer into the row and commits it with the handler's writes.
func (c *claim) Complete(ctx context.Context, resp *idemserver.Response, now, expires time.Time) error {
	header, err := json.Marshal(resp.Header)
	if err != nil {
		c.abort(ctx)
		return fmt.Errorf("pgserver: complete: %w", err)
	}
	body := resp.Body
	if body == nil {
		body = []byte{}
	}
	if err := c.own(ctx, "state = 2, owner = NULL, expires_at = $5, response_status = $6, response_header = $7, response_body = $8",
		expires, resp.Status, header, body); err != nil {
		return fmt.Errorf("pgserver: complete: %w", err)
	}
	err = c.tx.Commit(ctx)
	c.tx = nil
	if err != nil {
		return fmt.Errorf("pgserver: complete: commit: %w", err)
	}
	return nil
}

// Release rolls back: the claim (and the handler's writes of this phase) vanish; a row a
// checkpoint committed stays processing until its lease passes.
func (c *claim) Release(ctx context.Context) error {
	if c.tx == nil {
		return idemserver.ErrNotOwner
	}
	err := c.tx.Rollback(context.WithoutCancel(ctx))
	c.tx = nil
	if err != nil {
		return fmt.Errorf("pgserver: release: %w", err)
	}
	return nil
}
