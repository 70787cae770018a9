package pgserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// claim is a key held by one request: its connection and transaction, holding the key's
// advisory lock twice: at transaction level, and at session level for the claim's whole life.
// The session-level lock is what keeps the key when a handler ends the claim's transaction
// itself (the transaction-level one ends with it): a retry gets 409 until the claim has
// stored its answer. Holding both also makes PostgreSQL refuse PREPARE TRANSACTION, which
// would carry the claim's row away from the connection. A connection goes back to the pool
// only once the session-level lock is confirmed dropped; otherwise it is closed, which drops
// it (releaseConn).
type claim struct {
	b         *Backend
	scope     idemserver.Scope
	pc        *pgxpool.Conn // nil once released to the pool
	conn      *pgx.Conn     // pc's, for the handler's Tx while its transaction is open
	tx        pgx.Tx        // nil once committed or rolled back
	sem       chan struct{} // the connection's turn, one at a time: claim methods (take) and the handler's statements (handlerTx)
	txN       uint64        // the transactions begun for the handler (a checkpoint begins the next)
	open      atomic.Uint64 // txN of the one the handler's Tx may run statements in, 0 once it ended
	stuck     atomic.Bool   // take gave up waiting for a holder that ignored its closed socket
	lock      int64         // lockID(scope), held at session level while pc is not nil
	xid       string        // the claim's transaction (pg_current_xact_id): another one on pc is the handler's
	checked   bool          // RollsBack asked the connection which transaction is open
	owner     string
	point     string
	expired   bool
	committed bool // a checkpoint committed the row: a rollback leaves it processing
	fp        []byte
	created   time.Time
	ended     bool // the handler ended the claim's transaction itself: its writes may stand
	refuse    bool // ended by a Checkpoint's check: the next Complete (the handler's answer) is refused

	failMu sync.Mutex
	fails  []failure // the handler's failed calls (fail), less those of savepoints rolled back since
}

// failure is a call of the handler's Tx that failed (handlerTx.fail).
type failure struct {
	sp  *handlerTx // the savepoint it failed in, nil for the claim's transaction itself
	err error
}

// ErrStatementFailed is returned by the claim's Checkpoint and Complete (wrapped with the
// first such error) when a statement the handler ran on the claim's transaction (Tx, or a
// savepoint of it that was not rolled back) failed: the transaction is rolled back instead of
// committed, so the middleware answers 503 with Retry-After, stores nothing, and a retry runs
// the handler again (after a checkpoint, once the lease passes, from its recovery point).
// PostgreSQL aborts a transaction one of whose statements it refused; this holds as well for
// a statement that failed before reaching it (its context already done, the connection busy
// with another goroutine's statement, the claim's transaction ended, an argument pgx cannot
// encode) or whose results could not be read, after which the transaction would have
// committed the handler's other writes without it: a debit without its credit, with the
// handler's 500 as the key's answer. pgx.ErrNoRows from a Scan is a result, not a failure; a
// savepoint's Rollback undoes the failures in it; Commit and Rollback of the claim's
// transaction (ErrTxOwned) are not statements.
var ErrStatementFailed = errors.New("pgserver: a statement of the handler failed in the claim's transaction, which is rolled back")

// fail records err as a failure of a call at level sp (nil: the claim's transaction). The
// first failure of a level is kept.
func (c *claim) fail(sp *handlerTx, err error) {
	c.failMu.Lock()
	defer c.failMu.Unlock()
	for _, f := range c.fails {
		if f.sp == sp {
			return
		}
	}
	c.fails = append(c.fails, failure{sp: sp, err: err})
}

// rolledBack forgets the failures in savepoint sp and in the savepoints begun inside it: its
// rollback undid them, as ROLLBACK TO SAVEPOINT recovers an aborted savepoint.
func (c *claim) rolledBack(sp *handlerTx) {
	c.failMu.Lock()
	defer c.failMu.Unlock()
	c.fails = slices.DeleteFunc(c.fails, func(f failure) bool { return f.sp.within(sp) })
}

// failedIn returns the first failure in savepoint sp or in a savepoint begun inside it,
// wrapped in ErrStatementFailed, or nil.
func (c *claim) failedIn(sp *handlerTx) error {
	c.failMu.Lock()
	defer c.failMu.Unlock()
	for _, f := range c.fails {
		if f.sp.within(sp) {
			return fmt.Errorf("%w: %w", ErrStatementFailed, f.err)
		}
	}
	return nil
}

// failed returns the first failure of the handler's calls, wrapped in ErrStatementFailed, or
// nil: a claim that has one must not commit (Checkpoint, Complete).
func (c *claim) failed() error {
	c.failMu.Lock()
	defer c.failMu.Unlock()
	if len(c.fails) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrStatementFailed, c.fails[0].err)
}

// ErrTxEnded is returned by Complete and Checkpoint when the handler ended the claim's
// transaction itself (a BEGIN and COMMIT or ROLLBACK through the connection, or the SQL
// sent through the transaction): its writes may have committed on their own, and the claim's
// lock is gone. The claim no longer rolls back (RollsBack is false), and the middleware
// stores a 500 "effect unknown" for the key instead of the answer.
var ErrTxEnded = errors.New("pgserver: the handler ended the claim's transaction itself; its writes may stand")

// handlerEnded reports whether the claim's transaction is no longer open on its connection
// (as far as the connection's last status says: a transaction the handler began since is
// told apart by its id, see sameTxGuard and RollsBack).
func (c *claim) handlerEnded() bool {
	return c.pc != nil && c.pc.Conn().PgConn().TxStatus() == 'I'
}

// giveUpEnded marks the claim ended by the handler. Whatever the handler left open on the
// connection is rolled back, but the connection and its session-level lock stay with the
// claim until the middleware's 500 is stored (completeEnded), so that no retry runs the
// handler meanwhile. refuse: the next Complete returns ErrTxEnded (the handler's answer,
// after a Checkpoint that found the transaction ended, must not be stored: the middleware
// then stores its 500).
func (c *claim) giveUpEnded(ctx context.Context, refuse bool) {
	c.ended, c.refuse, c.tx = true, refuse, nil // the pgx.Tx must not send its own ROLLBACK
	c.open.Store(0)
	if c.pc == nil {
		return
	}
	if c.pc.Conn().PgConn().TxStatus() != 'I' {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		if err := c.pc.Conn().PgConn().Exec(ctx, "ROLLBACK").Close(); err != nil {
			c.drop(ctx) // the lock goes with it; the 500 then goes through the pool
		}
	}
}

// sameTxGuard fails (division by zero) unless the open transaction is the claim's: pipelined
// ahead of a write, its error also stops what follows, COMMIT included.
const sameTxGuard = "SELECT 1 / (pg_current_xact_id_if_assigned()::text IS NOT DISTINCT FROM $1)::int"

// isDivisionByZero reports the error ownedUpdate and sameTxGuard raise.
func isDivisionByZero(err error) bool {
	pe := (*pgconn.PgError)(nil)
	return errors.As(err, &pe) && pe.Code == divisionByZero
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

// end rolls back what is open, drops the session-level lock and gives the connection back
// (releaseConn).
func (c *claim) end(ctx context.Context) {
	c.tx = nil // releaseConn's ROLLBACK ends it
	c.open.Store(0)
	if c.pc != nil {
		releaseConn(ctx, c.pc, c.lock)
		c.pc = nil
	}
}

// take gives the claim's connection to a claim method, ending (end) the handler's use of its
// transaction: a statement the handler's Tx runs (a goroutine it left behind, an inner handler
// still running after http.TimeoutHandler answered) finishes first, in the claim's
// transaction, and none runs after (handlerTx); Complete then rolls back (takeBusy). One still running after releaseTimeout is
// cancelled and its socket closed (as pgx does when a query's context ends): it fails, and so
// does the claim, which closing rolls back; the server then drops the key's lock. If its
// holder still does not let go (a CopyFrom whose source is stuck in the application's code),
// the claim gives the connection up a second later, and so do its later methods (held
// false): they send nothing (the closed connection rolled the transaction back), and the
// connection goes back to the pool, to be destroyed, once the holder returns.
// With end, the handler's use is ended again once the turn is held: a Checkpoint that held it
// meanwhile opened the next phase.
func (c *claim) take(end bool) (held bool) {
	held, _ = c.takeBusy(end)
	return held
}

// takeBusy is take, and reports whether the turn was held when it was asked for (busy): a
// statement of the handler's Tx was still running, or a claim method a goroutine of the
// handler called (Checkpoint).
func (c *claim) takeBusy(end bool) (held, busy bool) {
	if end {
		c.open.Store(0)
		defer func() {
			if held {
				c.open.Store(0)
			}
		}()
	}
	if c.stuck.Load() { // an earlier method gave up on the holder: it is stuck still
		return false, true
	}
	select {
	case c.sem <- struct{}{}:
		return true, false
	default:
	}
	wait := time.Duration(turnTimeout.Load())
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case c.sem <- struct{}{}:
		return true, true
	case <-t.C:
	}
	pg := c.conn.PgConn() // c.conn, not c.pc: the holder may be changing c.pc
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	_ = pg.CancelRequest(ctx) // both safe beside the statement's goroutine
	cancel()
	_ = pg.Conn().Close()
	t.Reset(wait / 5) // a statement on a closed socket fails at once
	select {
	case c.sem <- struct{}{}:
		return true, true
	case <-t.C:
		c.stuck.Store(true)
		go func() { // once the holder lets go, the closed connection goes back to be destroyed
			c.sem <- struct{}{}
			if c.pc != nil {
				c.pc.Release()
				c.pc = nil
			}
			c.tx = nil
			<-c.sem
		}()
		return false, true
	}
}

// errAbandoned is a claim method's error once its connection was closed under a statement
// that would not stop (take): the claim's transaction is rolled back, and nothing more is
// sent on that connection.
var errAbandoned = errors.New("the claim's connection was closed under a handler's statement that did not stop within the release timeout; its transaction is rolled back")

// give ends a claim method's turn on the connection, if take gave it one.
func (c *claim) give(held bool) {
	if held {
		<-c.sem
	}
}

// releaseTimeout bounds the statements that give a claim's connection back (time.Duration).
const releaseTimeout = 5 * time.Second

// turnTimeout is how long a claim method waits for a handler's statement to give the
// connection back before it cancels it (take), in nanoseconds: releaseTimeout, shorter in
// tests.
var turnTimeout = func() (v atomic.Int64) { v.Store(int64(releaseTimeout)); return }()

// releaseConn rolls back what is open on pc, drops the session-level advisory lock on lock,
// and gives pc back to the pool, in one round trip. A connection where that cannot be
// confirmed is closed instead: closing drops the lock, which pooled would hold the key for
// the connection's life.
func releaseConn(ctx context.Context, pc *pgxpool.Conn, lock int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	conn := pc.Conn().PgConn()
	// Simple protocol: two statements in one round trip (the lock is our own number).
	results, err := conn.Exec(ctx, fmt.Sprintf("ROLLBACK; SELECT pg_advisory_unlock(%d)", lock)).ReadAll()
	unlocked := err == nil && len(results) == 2 && len(results[1].Rows) == 1 && string(results[1].Rows[0][0]) == "t"
	if !unlocked || conn.TxStatus() != 'I' {
		_ = pc.Conn().Close(ctx) // the pool drops a closed connection on Release
	}
	pc.Release()
}

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

// Complete writes the answer into the row and commits it with the handler's writes, in one
// round trip (the transaction check, the UPDATE, SET LOCAL synchronous_commit, COMMIT and the
// session-level unlock pipelined). It rolls back instead when a statement of the handler was
// still running as it began (ErrHandlerStillRunning) or one failed (ErrStatementFailed).
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
	batch.Queue(sameTxGuard, c.xid)
	batch.Queue(fmt.Sprintf(ownedUpdate, "state = 2, owner = NULL, expires_at = $5, response_status = $6, response_header = $7, response_body = $8"),
		s.Tenant, s.Operation, s.Key, c.owner, expires, resp.StatusCode, string(header), body) // text: jsonb takes no bytea literal (simple protocol)
	// The client is told of the payment once this commits: a commit PostgreSQL acknowledges
	// before its WAL is written (synchronous_commit off, by the session's default or the
	// handler's SET LOCAL) could vanish in a crash with the charge it confirmed.
	batch.Queue("SET LOCAL synchronous_commit TO on")
	batch.Queue("COMMIT")
	batch.Queue("SELECT pg_advisory_unlock($1)", c.lock)
	br := c.tx.SendBatch(ctx, batch)
	_, guardErr := br.Exec()
	err = guardErr
	if err == nil {
		_, err = br.Exec() // the answer
	}
	if err == nil {
		_, err = br.Exec() // SET LOCAL
	}
	var tag string
	if err == nil {
		var ct pgconn.CommandTag
		ct, err = br.Exec()
		tag = ct.String()
	}
	committed := err == nil && tag == "COMMIT"
	unlocked := false
	if committed {
		_ = br.QueryRow().Scan(&unlocked) // not confirmed: the connection is closed below
	}
	if cerr := br.Close(); err == nil && !committed {
		err = cerr
	}
	if isDivisionByZero(guardErr) { // the handler ended the claim's transaction and began another
		c.giveUpEnded(ctx, false)
		return fmt.Errorf("pgserver: complete: %w", ErrTxEnded)
	}
	if committed && unlocked && c.pc.Conn().PgConn().TxStatus() == 'I' {
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
