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
