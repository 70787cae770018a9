package pgserver

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
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
type handlerTx struct {
	c  *claim
	id uint64 // claim.open when handed out
	sp pgx.Tx // a savepoint (Begin), or nil: the claim's transaction
}

var _ pgx.Tx = (*handlerTx)(nil)

// take holds the claim's connection for one call and returns the transaction to run it in;
// done gives the connection back.
func (h *handlerTx) take() (pgx.Tx, error) {
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

// Begin makes a savepoint, bound to the claim as its transaction is.
func (h *handlerTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := h.take()
	if err != nil {
		return nil, err
	}
	defer h.done()
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &handlerTx{c: h.c, id: h.id, sp: sp}, nil
}

// Commit returns ErrTxOwned for the claim's transaction, and releases a savepoint.
func (h *handlerTx) Commit(ctx context.Context) error {
	if h.sp == nil {
		return h.owned()
	}
	tx, err := h.take()
	if err != nil {
		return err
	}
	defer h.done()
	return tx.Commit(ctx)
}

// Rollback returns ErrTxOwned for the claim's transaction, and rolls back to a savepoint.
func (h *handlerTx) Rollback(ctx context.Context) error {
	if h.sp == nil {
		return h.owned()
	}
	tx, err := h.take()
	if err != nil {
		return err
	}
	defer h.done()
	return tx.Rollback(ctx)
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
	return tx.Exec(ctx, sql, args...)
}

func (h *handlerTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	tx, err := h.take()
	if err != nil {
		return nil, err
	}
	defer h.done()
	return tx.Prepare(ctx, name, sql)
}

func (h *handlerTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	tx, err := h.take()
	if err != nil {
		return 0, err
	}
	defer h.done()
	return tx.CopyFrom(ctx, table, columns, src)
}

func (h *handlerTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	tx, err := h.take()
	if err != nil {
		return &handlerRows{err: err}, err
	}
	defer h.done()
	rows, err := tx.Query(ctx, sql, args...)
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
// serves other requests. A handler must not keep it.
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

// handlerRows are a handler's rows: each call that may read the connection holds it as
// handlerTx's statements do. Rows the claim ended under are left unread: their connection
// was busy with them, so the claim closed it rather than pooling it.
type handlerRows struct {
	h    *handlerTx
	rows pgx.Rows // nil when the query was refused (err)
	err  error
}

var _ pgx.Rows = (*handlerRows)(nil)

// hold is take for the rows; false with err set when refused.
func (r *handlerRows) hold() bool {
	if r.err != nil {
		return false
	}
	if _, err := r.h.take(); err != nil {
		r.err = err
		return false
	}
	return true
}

func (r *handlerRows) Close() {
	if r.hold() {
		defer r.h.done()
		r.rows.Close()
	}
}

func (r *handlerRows) Err() error {
	if r.err != nil || r.rows == nil {
		return r.err
	}
	return r.rows.Err()
}

func (r *handlerRows) Next() bool {
	if !r.hold() {
		return false
	}
	defer r.h.done()
	return r.rows.Next()
}

func (r *handlerRows) Scan(dest ...any) error {
	if !r.hold() {
		return r.err
	}
	defer r.h.done()
	return r.rows.Scan(dest...)
}

func (r *handlerRows) Values() ([]any, error) {
	if !r.hold() {
		return nil, r.err
	}
	defer r.h.done()
	return r.rows.Values()
}

func (r *handlerRows) RawValues() [][]byte {
	if !r.hold() {
		return nil
	}
	defer r.h.done()
	return r.rows.RawValues()
}

func (r *handlerRows) CommandTag() pgconn.CommandTag {
	if r.rows == nil {
		return pgconn.CommandTag{}
	}
	return r.rows.CommandTag()
}

func (r *handlerRows) FieldDescriptions() []pgconn.FieldDescription {
	if r.rows == nil {
		return nil
	}
	return r.rows.FieldDescriptions()
}

func (r *handlerRows) TypeMap() *pgtype.Map {
	if r.rows == nil {
		return nil
	}
	return r.rows.TypeMap()
}

func (r *handlerRows) Conn() *pgx.Conn {
	if r.h == nil {
		return nil
	}
	return r.h.Conn()
}

// handlerRow is QueryRow's row: Scan reads it only while the claim's transaction is open.
type handlerRow struct {
	h   *handlerTx
	row pgx.Row
	err error
}

func (r *handlerRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	if _, err := r.h.take(); err != nil {
		return err
	}
	defer r.h.done()
	return r.row.Scan(dest...)
}

// handlerBatch is SendBatch's results, read only while the claim's transaction is open.
type handlerBatch struct {
	h   *handlerTx
	br  pgx.BatchResults
	err error // refused: the results are left unread (see handlerRows)
}

func (b *handlerBatch) hold() error {
	if b.err == nil {
		if _, err := b.h.take(); err != nil {
			b.err = err
		}
	}
	return b.err
}

func (b *handlerBatch) Exec() (pgconn.CommandTag, error) {
	if err := b.hold(); err != nil {
		return pgconn.CommandTag{}, err
	}
	defer b.h.done()
	return b.br.Exec()
}

func (b *handlerBatch) Query() (pgx.Rows, error) {
	if err := b.hold(); err != nil {
		return &handlerRows{err: err}, err
	}
	defer b.h.done()
	rows, err := b.br.Query()
	if rows == nil {
		return &handlerRows{err: err}, err
	}
	return &handlerRows{h: b.h, rows: rows}, err
}

func (b *handlerBatch) QueryRow() pgx.Row {
	if err := b.hold(); err != nil {
		return &handlerRow{err: err}
	}
	defer b.h.done()
	return &handlerRow{h: b.h, row: b.br.QueryRow()}
}

// Tx is nil: the claim's transaction refuses a batch that begins one (Batch.BeginTx).
func (b *handlerBatch) Tx() pgx.Tx { return nil }

func (b *handlerBatch) Close() error {
	if err := b.hold(); err != nil {
		return err
	}
	defer b.h.done()
	return b.br.Close()
}
