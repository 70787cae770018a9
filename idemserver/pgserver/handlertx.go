package pgserver

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// errClaimEnded is what the handler's Tx (and its savepoints, rows, batches and large
// objects) returns once the transaction it was handed is no longer the claim's open one.
var errClaimEnded = fmt.Errorf("pgserver: the claim's transaction has ended (the key's answer was stored, the claim released, or a checkpoint began the next phase: ask Tx again); a statement now would run in another request's transaction: %w", pgx.ErrTxClosed)

// errTxBusy is returned to a statement tried while another holds the claim's connection:
// another goroutine's, or the middleware's, ending the claim.
var errTxBusy = errors.New("pgserver: the claim's connection is busy (a statement of another goroutine, or the middleware ending the claim)")

// handlerTx is the claim's transaction as a handler holds it (Tx), or a savepoint of it (sp).
// The pgx.Tx underneath never learns that the claim ended (Complete commits in its batch,
// releaseConn rolls back in raw SQL), and its connection then serves the next claim, maybe
// another tenant's. So each call holds the claim's connection (claim.sem, never waited for)
// and runs only while the transaction it was handed for (id) is still the claim's open one;
// otherwise it returns errClaimEnded and sends nothing. Go-side only: no round trip.
//
// A call that fails is recorded on the claim (fail), whether PostgreSQL refused the statement
// (which aborts the transaction anyway) or it failed before reaching it (its context done,
// pgconn.SafeToRetry, errTxBusy, errClaimEnded, an argument that cannot be encoded), which
// leaves the transaction committable: Checkpoint and Complete then roll back instead of
// committing the handler's writes without the one that failed (ErrStatementFailed). As in
// PostgreSQL, a failure in a savepoint is undone by rolling the savepoint back (or one around
// it); left open or released, it fails the claim.
type handlerTx struct {
	c      *claim
	id     uint64      // claim.open when handed out
	sp     pgx.Tx      // a savepoint (Begin), or nil: the claim's transaction
	parent *handlerTx  // for a savepoint, the transaction or savepoint it was begun in
	closed atomic.Bool // for a savepoint, its Commit or Rollback was called: pgx closed it
}

var _ pgx.Tx = (*handlerTx)(nil)

// take holds the claim's connection for one call and returns the transaction to run it in;
// done gives the connection back. A refusal is a failure of the call (fail).
func (h *handlerTx) take() (pgx.Tx, error) {
	tx, err := h.turn()
	h.fail(err)
	return tx, err
}

// turn is take without recording a refusal, for the calls that only tidy up (closing rows or
// a batch the handler has done with): after a Checkpoint, a deferred Close of the first
// phase's rows is refused, and must not fail the next phase.
func (h *handlerTx) turn() (pgx.Tx, error) {
	c := h.c
	select {
	case c.sem <- struct{}{}:
	default: // a claim method (maybe ending the claim) or another goroutine's statement
		if c.open.Load() != h.id {
			return nil, errClaimEnded
		}
		return nil, errTxBusy
	}
	if c.open.Load() != h.id || c.tx == nil { // c.tx is read under the turn: nil once ended
		<-c.sem
		return nil, errClaimEnded
	}
	if h.sp != nil {
		return h.sp, nil
	}
	return c.tx, nil
}

func (h *handlerTx) done() { <-h.c.sem }

// fail records err, a call's error, as a failure of the claim's transaction (claim.fail) at
// h's level: its savepoint, or the level around a savepoint already closed (a statement on
// it fails there). Only what PostgreSQL cannot know of is recorded: a statement that never
// reached it (a context already done, a refusal, an argument that could not be encoded)
// leaves its transaction committable. Not failures: nil; pgx.ErrNoRows (a Scan's "no row", a
// result); an error PostgreSQL reported (*pgconn.PgError: it aborted the transaction or the
// savepoint itself, and a handler that recovers with ROLLBACK TO SAVEPOINT, in SQL or through
// a savepoint, has a transaction PostgreSQL will commit). A value that could not be scanned
// (pgx.ScanArgError) is a failure: PostgreSQL never learns of it, and a handler answering it
// with a 500 would have its earlier writes committed with that answer; scan a value that
// may be NULL into a type that holds NULL (or COALESCE it) (adversarial run).
func (h *handlerTx) fail(err error) {
	if err == nil || errors.Is(err, pgx.ErrNoRows) {
		return
	}
	if _, ok := errors.AsType[*pgconn.PgError](err); ok {
		return
	}
	lvl := h
	for lvl.sp != nil && lvl.closed.Load() {
		lvl = lvl.parent
	}
	if lvl.sp == nil {
		lvl = nil // the claim's transaction
	}
	h.c.fail(lvl, err)
}

// within reports whether savepoint h is sp or was begun inside it; false for nil h (the
// claim's transaction).
func (h *handlerTx) within(sp *handlerTx) bool {
	for x := h; x != nil && x.sp != nil; x = x.parent {
		if x == sp {
			return true
		}
	}
	return false
}

// Begin makes a savepoint, bound to the claim as its transaction is.
func (h *handlerTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := h.take()
	if err != nil {
		return nil, err
	}
	defer h.done()
	sp, err := tx.Begin(ctx)
	if err != nil {
		h.fail(err)
		return nil, err
	}
	return &handlerTx{c: h.c, id: h.id, sp: sp, parent: h}, nil
}

// Commit returns ErrTxOwned for the claim's transaction, and releases a savepoint. A savepoint
// in which a statement failed is not released: Commit rolls it back and returns an error
// wrapping ErrStatementFailed, and, as PostgreSQL's RELEASE of an aborted savepoint, leaves the
// claim's transaction failed unless a savepoint around it is rolled back. Once the savepoint
// is closed, Commit and Rollback return pgx.ErrTxClosed and do nothing.
func (h *handlerTx) Commit(ctx context.Context) error {
	return h.endSavepoint(func(tx pgx.Tx) error {
		if failed := h.c.failedIn(h); failed != nil {
			h.closed.Store(true)
			_ = tx.Rollback(ctx) // closes it; its failure stays
			return fmt.Errorf("pgserver: savepoint not released: %w", failed)
		}
		h.closed.Store(true)
		err := tx.Commit(ctx)
		h.fail(err) // at the level around it: its writes may stay
		return err
	})
}

// endSavepoint runs end, Commit's or Rollback's work, on h's savepoint under the claim's
// turn: ErrTxOwned for the claim's transaction, pgx.ErrTxClosed once the savepoint is closed.
func (h *handlerTx) endSavepoint(end func(tx pgx.Tx) error) error {
	if h.sp == nil {
		return h.owned()
	}
	if h.closed.Load() {
		return pgx.ErrTxClosed
	}
	tx, err := h.take()
	if err != nil {
		return err
	}
	defer h.done()
	return end(tx)
}

// Rollback returns ErrTxOwned for the claim's transaction, and rolls back to a savepoint,
// undoing the failures of statements in it. A savepoint's Rollback after its Commit or
// Rollback returns pgx.ErrTxClosed and does nothing.
func (h *handlerTx) Rollback(ctx context.Context) error {
	return h.endSavepoint(func(tx pgx.Tx) error {
		h.closed.Store(true)
		if err := tx.Rollback(ctx); err != nil {
			h.fail(err) // at the level around it: its writes may stay
			return err
		}
		h.c.rolledBack(h)
		return nil
	})
}

// owned is the claim's transaction's Commit and Rollback: nothing is sent.
func (h *handlerTx) owned() error {
	if h.c.open.Load() != h.id {
		return errClaimEnded
	}
	return ErrTxOwned
}

func (h *handlerTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tx, err := h.take()
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer h.done()
	tag, err := tx.Exec(ctx, sql, args...)
	h.fail(err)
	return tag, err
}

func (h *handlerTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	tx, err := h.take()
	if err != nil {
		return nil, err
	}
	defer h.done()
	sd, err := tx.Prepare(ctx, name, sql)
	h.fail(err)
	return sd, err
}

func (h *handlerTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	tx, err := h.take()
	if err != nil {
		return 0, err
	}
	defer h.done()
	n, err := tx.CopyFrom(ctx, table, columns, src)
	h.fail(err)
	return n, err
}

func (h *handlerTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	tx, err := h.take()
	if err != nil {
		return &handlerRows{err: err}, err
	}
	defer h.done()
	rows, err := tx.Query(ctx, sql, args...)
	h.fail(err)
	if rows == nil {
		return &handlerRows{err: err}, err
	}
	return &handlerRows{h: h, rows: rows}, err
}

// QueryRow sends the query now, as pgx does; its Scan reads the answer only while the
// claim's transaction is open.
func (h *handlerTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	tx, err := h.take()
	if err != nil {
		return &handlerRow{err: err}
	}
	defer h.done()
	return &handlerRow{h: h, row: tx.QueryRow(ctx, sql, args...)}
}

func (h *handlerTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	tx, err := h.take()
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	defer h.done()
	return &handlerBatch{h: h, br: tx.SendBatch(ctx, b)}
}

// LargeObjects runs its statements through h, so they stop with the claim too.
func (h *handlerTx) LargeObjects() pgx.LargeObjects { return largeObjects(h) }

// Conn is the claim's connection while its transaction is open, nil after: pooled, it
// serves other requests. A handler must not keep it. Statements run on it directly are not
// watched as the Tx's are: one that fails without reaching PostgreSQL (a context already
// done) is not recorded on the claim, so a handler answering that failure with a 5xx has the
// writes before it committed with the answer. Run statements through the Tx; if one through
// Conn fails, answer with idemserver.NotExecuted or panic (nothing is stored).
func (h *handlerTx) Conn() *pgx.Conn {
	if h.c.open.Load() != h.id {
		return nil
	}
	return h.c.conn
}

// largeObjects is a pgx.LargeObjects on tx. pgx builds one only on its own transactions,
// whose statements would bypass handlerTx's check, so its one field, tx, is set here. Should a
// pgx release rename it, the zero LargeObjects is returned: its methods panic rather than run
// in another request's transaction (TestStaleHandlerTxSendsNothing fails first).
func largeObjects(tx pgx.Tx) pgx.LargeObjects {
	var lo pgx.LargeObjects
	f := reflect.ValueOf(&lo).Elem().FieldByName("tx")
	if f.IsValid() && f.Type() == reflect.TypeFor[pgx.Tx]() {
		reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(reflect.ValueOf(&tx).Elem())
	}
	return lo
}
