package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// claimSQL claims a key in one statement, pipelined behind the claim's BEGIN (one round trip
// for both). In order:
//
//   - l takes the key's advisory lock at transaction level and, only with it, at session level
//     (CASE, so that the session-level lock is held once or not at all; a session that holds
//     a lock gets it again at once, at either level). The lock, not the primary key, is what
//     tells a request that another one holds the key: a second INSERT of the key would wait
//     on the first one's uncommitted row for as long as its handler runs, holding a
//     connection, where the lock answers "in progress" (409) at once. The session-level lock
//     keeps the key if the handler ends the claim's transaction itself (see claim);
//   - ins, under the lock only, inserts the key's processing row unless a row exists. ON
//     CONFLICT checks the index as it stands, committed rows included, not this statement's
//     snapshot, which was taken before the lock: a key whose first request committed between
//     the snapshot and the lock is never taken for a fresh one. It returns the claim's
//     transaction id (Complete checks it);
//   - the row as this statement's snapshot holds it: a stored answer that is final (live and
//     not about to expire) is replayed from it, whoever holds the lock; anything else is read
//     again after the lock (claimExisting).
//
// The primary key stays the last guard: two transactions can never both commit a row for a
// key, whatever happened to the locks.
const claimSQL = `WITH l AS (
	SELECT CASE WHEN pg_try_advisory_xact_lock($8) THEN pg_try_advisory_lock($8) ELSE false END AS got
), ins AS (
	INSERT INTO idem_server_keys (tenant, operation, key, fingerprint, state, owner, created_at, locked_until)
	SELECT $1, $2, $3, $4, 1, $5, $6, $7 FROM l WHERE l.got
	ON CONFLICT (tenant, operation, key) DO NOTHING
	RETURNING pg_current_xact_id()::text AS xid
)
SELECT l.got, (SELECT xid FROM ins), clock_timestamp(), k.fingerprint, k.state, k.recovery_point, k.owner,
	k.created_at, k.locked_until, k.expires_at, k.response_status, k.response_header, k.response_body
FROM l LEFT JOIN idem_server_keys k ON k.tenant = $1 AND k.operation = $2 AND k.key = $3`

// Claim implements idemserver.Backend. A fresh key costs one round trip: BEGIN and claimSQL,
// pipelined. A key with a row costs one more (claimExisting) unless its stored answer is
// final, and a request that gets the key's answer or "in progress" one more to roll back.
func (b *Backend) Claim(ctx context.Context, req idemserver.ClaimRequest) (idemserver.Claim, *idemserver.Record, error) {
	s := req.Scope
	entry := time.Now() // req.Now was read just before: local offsets from here bound the database's clock reading
	// The claim holds its pool connection until it ends, so that its phases (Checkpoint)
	// and its final write and COMMIT share one connection.
	pc, err := b.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("pgserver: claim: %w", err)
	}
	lock := lockID(s)
	c := &claim{b: b, scope: s, pc: pc, conn: pc.Conn(), sem: make(chan struct{}, 1), txN: 1, lock: lock, owner: newOwner(), fp: req.Fingerprint, created: req.Now}
	lockedUntil := req.Now.Add(req.Lease)
	batch := &pgx.Batch{}
	batch.BeginTx(pgx.TxOptions{})
	batch.Queue(claimSQL, s.Tenant, s.Operation, s.Key, req.Fingerprint, c.owner, req.Now, lockedUntil, lock)
	sent := time.Since(entry)
	br := pc.Conn().SendBatch(ctx, batch)
	tx := br.Tx()
	_, err = br.Exec() // BEGIN
	var (
		got  bool
		xid  *string
		db   time.Time
		seen nullableRow
	)
	lockKnown := false // the claim statement answered: got says whether this session holds the lock
	if err == nil {
		err = br.QueryRow().Scan(append([]any{&got, &xid, &db}, seen.dest()...)...)
		lockKnown = err == nil
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	keep := false
	defer func() {
		switch {
		case keep:
		case got: // the session-level lock too
			releaseConn(ctx, pc, lock)
		default:
			_ = tx.Rollback(context.WithoutCancel(ctx))
			pc.Release()
		}
	}()
	if err != nil {
		if !lockKnown {
			got = true // the lock may have been taken: releaseConn drops it, or closes the connection
		}
		return nil, nil, fmt.Errorf("pgserver: claim: %w", err)
	}
	// Checked after the statement so that the claim keeps its one round trip; the deferred
	// rollback undoes the insert, so a refused claim leaves the key as it was.
	if err := b.checkClock("claim", req.Now.Add(sent), req.Now.Add(time.Since(entry)), db); err != nil {
		return nil, nil, err
	}
	c.tx = tx
	c.open.Store(c.txN)
	if got && xid != nil { // inserted: the key was free
		c.xid, keep = *xid, true
		return c, nil, nil
	}
	cur, err := seen.row()
	if err != nil {
		return nil, nil, fmt.Errorf("pgserver: claim: %w", err)
	}
	// A stored answer is replayed (or 422) whoever holds the lock (another replay), unless it
	// expires so soon that a holder whose clock may be up to twice the allowed skew ahead may
	// be running the key again: then, as for any key in flight, 409, or, under the lock, the
	// row is read again.
	if cur != nil && cur.rec.State == idemserver.StateCompleted && req.Now.Add(b.skewMargin()).Before(cur.rec.ExpiresAt) {
		return nil, &cur.rec, nil
	}
	if !got {
		// Another transaction holds the key: in progress, fingerprint not visible yet.
		return nil, &idemserver.Record{State: idemserver.StateProcessing}, nil
	}
	c2, rec, err := c.claimExisting(ctx, req, lockedUntil)
	keep = err == nil && c2 != nil
	return c2, rec, err
}

// claimExisting goes on with a claim that holds the key's locks but found a row (or one was
// committed after its statement's snapshot): the row, read now that the lock is held, is
// locked (NOWAIT: a row a purge holds is "in progress" at once, never a wait with a
// connection held) and then replayed, refused, replaced (an expired answer) or taken over (a
// checkpointed row whose owner is gone and whose lease has passed). Each write returns the
// transaction's id, which Complete checks.
func (c *claim) claimExisting(ctx context.Context, req idemserver.ClaimRequest, lockedUntil time.Time) (idemserver.Claim, *idemserver.Record, error) {
	s := c.scope
	cur, err := scanRow(c.tx.QueryRow(ctx, selectRow+" FOR UPDATE NOWAIT", s.Tenant, s.Operation, s.Key))
	if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == lockNotAvailable {
		return nil, &idemserver.Record{State: idemserver.StateProcessing}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("pgserver: claim: %w", err)
	}
	switch {
	case cur == nil: // deleted since (a purge)
		err = c.tx.QueryRow(ctx, `INSERT INTO idem_server_keys (tenant, operation, key, fingerprint, state, owner, created_at, locked_until)
			VALUES ($1, $2, $3, $4, 1, $5, $6, $7) RETURNING pg_current_xact_id()::text`,
			s.Tenant, s.Operation, s.Key, req.Fingerprint, c.owner, req.Now, lockedUntil).Scan(&c.xid)
	case cur.rec.State == idemserver.StateCompleted && !req.Now.Before(cur.rec.ExpiresAt):
		c.expired = true
		err = c.tx.QueryRow(ctx, `UPDATE idem_server_keys SET fingerprint = $4, state = 1, recovery_point = '', owner = $5,
			created_at = $6, locked_until = $7, expires_at = NULL, response_status = NULL, response_header = NULL, response_body = NULL
			WHERE tenant = $1 AND operation = $2 AND key = $3 RETURNING pg_current_xact_id()::text`,
			s.Tenant, s.Operation, s.Key, req.Fingerprint, c.owner, req.Now, lockedUntil).Scan(&c.xid)
	case string(cur.rec.Fingerprint) != string(req.Fingerprint), cur.rec.State == idemserver.StateCompleted,
		req.Now.Before(cur.rec.LockedUntil):
		return nil, &cur.rec, nil
	default: // a checkpointed row whose owner is gone and whose lease has passed: take it over
		c.point, c.committed = cur.rec.RecoveryPoint, true
		err = c.takeOver(ctx, lockedUntil)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("pgserver: claim: %w", err)
	}
	return c, nil, nil
}

// nullableRow is selectRow's columns as claimSQL returns them, from a LEFT JOIN: all NULL when
// the key has no row.
type nullableRow struct {
	fingerprint []byte
	state       *int16
	point       *string
	owner       *string
	created     *time.Time
	lockedUntil *time.Time
	expires     *time.Time
	status      *int32
	header      []byte
	body        []byte
}

func (n *nullableRow) dest() []any {
	return []any{&n.fingerprint, &n.state, &n.point, &n.owner, &n.created, &n.lockedUntil, &n.expires, &n.status, &n.header, &n.body}
}

// row is the record n holds, nil when the key had no row.
func (n *nullableRow) row() (*row, error) {
	if n.state == nil {
		return nil, nil
	}
	out := row{owner: n.owner}
	out.rec.Fingerprint, out.rec.State = n.fingerprint, idemserver.State(*n.state)
	if n.point != nil {
		out.rec.RecoveryPoint = *n.point
	}
	if n.created != nil {
		out.rec.CreatedAt = *n.created
	}
	if n.lockedUntil != nil {
		out.rec.LockedUntil = *n.lockedUntil
	}
	if n.expires != nil {
		out.rec.ExpiresAt = *n.expires
	}
	if n.status != nil {
		resp := &idemserver.Response{StatusCode: int(*n.status), Header: http.Header{}, Body: n.body}
		if len(n.header) > 0 {
			h, err := decodeHeader(n.header)
			if err != nil {
				return nil, fmt.Errorf("stored header: %w", err)
			}
			resp.Header = h
		}
		if resp.Body == nil {
			resp.Body = []byte{}
		}
		out.rec.Response = resp
	}
	return &out, nil
}
