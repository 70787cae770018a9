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
// for both). It writes nothing: a fresh key's row is written once, with its answer (Complete)
// or its first recovery point (Checkpoint), and until then the key's advisory locks are what
// keeps it. In order:
//
//   - l takes the key's advisory lock at transaction level and, only with it, at session level
//     (CASE, so that the session-level lock is held once or not at all; a session that holds
//     a lock gets it again at once, at either level). The lock, not the primary key, is what
//     tells a request that another one holds the key: a second INSERT of the key would wait
//     on the first one's uncommitted row for as long as its handler runs, holding a
//     connection, where the lock answers "in progress" (409) at once. The session-level lock
//     keeps the key if the handler ends the claim's transaction itself (see claim);
//   - x, under the lock only, assigns the claim's transaction id (Complete checks it) and
//     tells whether the row read below can be trusted to be the key's latest (fresh): the
//     statement's snapshot was taken before the lock, so a request that held the key and
//     committed its answer in between left a row this snapshot does not see. Every request
//     that writes a key's row holds the key's lock until it commits, and PostgreSQL marks a
//     transaction committed before it releases its locks, so such a writer is a transaction
//     the snapshot saw in progress (pg_snapshot_xip) or that began after it (from
//     pg_snapshot_xmax up to the id just assigned, which came after the lock), and it has
//     committed by now. If none of those has (a range too long to walk counts as one), no
//     row was committed for the key since the snapshot; otherwise the row is read again
//     (claimExisting). The primary key stays the last guard (Complete's INSERT fails);
//   - the row as this statement's snapshot holds it: a stored answer that is final (live and
//     not about to expire) is replayed from it, whoever holds the lock; anything else is read
//     again after the lock (claimExisting).
const claimSQL = `WITH l AS (
	SELECT CASE WHEN pg_try_advisory_xact_lock($4) THEN pg_try_advisory_lock($4) ELSE false END AS got
), x AS (
	SELECT pg_current_xact_id() AS xid, pg_current_snapshot() AS snap FROM l WHERE l.got
), f AS (
	SELECT x.xid, current_setting('transaction_isolation') = 'read committed' AS rc,
		NOT EXISTS (SELECT 1 FROM pg_snapshot_xip(x.snap) AS t(id) WHERE pg_xact_status(t.id) = 'committed')
		AND x.xid::text::bigint - pg_snapshot_xmax(x.snap)::text::bigint <= ` + freshRange + `
		AND NOT EXISTS (SELECT 1 FROM generate_series(pg_snapshot_xmax(x.snap)::text::bigint, x.xid::text::bigint - 1) AS g(id)
			WHERE pg_xact_status(g.id::text::xid8) = 'committed') AS fresh
	FROM x
)
SELECT l.got, f.xid::text, f.fresh, f.rc, clock_timestamp(), k.fingerprint, k.state, k.recovery_point, k.owner,
	k.created_at, k.locked_until, k.expires_at, k.response_status, k.response_header, k.response_body
FROM l LEFT JOIN f ON true LEFT JOIN idem_server_keys k ON k.tenant = $1 AND k.operation = $2 AND k.key = $3`

// freshRange is how many transaction ids begun since the claim statement's snapshot claimSQL
// checks one by one; beyond it the row is read again instead.
const freshRange = "64"

// claimTries is how many times Claim begins again when its snapshot may have missed the
// key's row outside read committed, where a second statement sees the same snapshot; then
// the key is "in progress" (409).
const claimTries = 3

// Claim implements idemserver.Backend. A fresh key costs one round trip: BEGIN and claimSQL,
// pipelined. A key with a row costs one more (claimExisting) unless its stored answer is
// final, and so does a key whose claim ran while another transaction committed (see
// claimSQL; above read committed the claim begins again instead, at most claimTries times);
// a request that gets the key's answer or "in progress" costs one more to roll back.
func (b *Backend) Claim(ctx context.Context, req idemserver.ClaimRequest) (idemserver.Claim, *idemserver.Record, error) {
	for range claimTries {
		c, rec, again, err := b.claimOnce(ctx, req)
		if !again {
			return c, rec, err
		}
	}
	return nil, &idemserver.Record{State: idemserver.StateProcessing}, nil
}

// claimOnce is one try of Claim; again reports that it gave the key back because, outside
// read committed, its snapshot may have missed a row committed before it took the lock.
func (b *Backend) claimOnce(ctx context.Context, req idemserver.ClaimRequest) (_ idemserver.Claim, _ *idemserver.Record, again bool, _ error) {
	s := req.Scope
	entry := time.Now() // req.Now was read just before: local offsets from here bound the database's clock reading
	// The claim holds its pool connection until it ends, so that its phases (Checkpoint)
	// and its final write and COMMIT share one connection.
	pc, err := b.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, false, fmt.Errorf("pgserver: claim: %w", err)
	}
	lock := lockID(s)
	lockedUntil := req.Now.Add(req.Lease)
	c := &claim{b: b, scope: s, pc: pc, conn: pc.Conn(), sem: make(chan struct{}, 1), txN: 1, lock: lock, owner: newOwner(),
		fp: req.Fingerprint, created: req.Now, until: lockedUntil}
	batch := &pgx.Batch{}
	batch.BeginTx(pgx.TxOptions{})
	batch.Queue(claimSQL, s.Tenant, s.Operation, s.Key, lock)
	sent := time.Since(entry)
	br := pc.Conn().SendBatch(ctx, batch)
	tx := br.Tx()
	_, err = br.Exec() // BEGIN
	var (
		got       bool
		xid       *string
		fresh, rc *bool
		db        time.Time
		seen      nullableRow
	)
	lockKnown := false // the claim statement answered: got says whether this session holds the lock
	if err == nil {
		err = br.QueryRow().Scan(append([]any{&got, &xid, &fresh, &rc, &db}, seen.dest()...)...)
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
	if err == nil && got && (xid == nil || fresh == nil || rc == nil) {
		err = errors.New("the claim statement returned no transaction id")
	}
	if err != nil {
		if !lockKnown {
			got = true // the lock may have been taken: releaseConn drops it, or closes the connection
		}
		return nil, nil, false, fmt.Errorf("pgserver: claim: %w", err)
	}
	// Checked after the statement so that the claim keeps its one round trip; the deferred
	// rollback gives the key back.
	if err := b.checkClock("claim", req.Now.Add(sent), req.Now.Add(time.Since(entry)), db); err != nil {
		return nil, nil, false, err
	}
	c.tx = tx
	c.open.Store(c.txN)
	cur, err := seen.row()
	if err != nil {
		return nil, nil, false, fmt.Errorf("pgserver: claim: %w", err)
	}
	// A stored answer is replayed (or 422) whoever holds the lock (another replay), unless it
	// expires so soon that a holder whose clock may be up to twice the allowed skew ahead may
	// be running the key again: then, as for any key in flight, 409, or, under the lock, the
	// row is read again.
	if cur != nil && cur.rec.State == idemserver.StateCompleted && req.Now.Add(b.skewMargin()).Before(cur.rec.ExpiresAt) {
		return nil, &cur.rec, false, nil
	}
	if !got {
		// Another transaction holds the key: in progress, fingerprint not visible yet.
		return nil, &idemserver.Record{State: idemserver.StateProcessing}, false, nil
	}
	c.xid = *xid
	if cur == nil && *fresh { // the key is free and has no row: the usual fresh key
		c.rowless, keep = true, true
		return c, nil, false, nil
	}
	if cur == nil && !*rc { // a second statement would read the same snapshot: begin again
		return nil, nil, true, nil
	}
	c2, rec, err := c.claimExisting(ctx, req, lockedUntil)
	keep = err == nil && c2 != nil
	return c2, rec, false, err
}

// claimExisting goes on with a claim that holds the key's locks but found a row (or one may
// have been committed after its statement's snapshot): the row, read now that the lock is held
// (in read committed, a statement's snapshot is its own), is
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
	case cur == nil: // no row (one a purge deleted since, or none committed before the lock): a fresh key
		c.rowless = true
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
