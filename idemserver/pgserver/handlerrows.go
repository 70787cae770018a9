package pgserver

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// The rows, row and batch results a handler's Tx returns: each holds the claim's connection
// until it is read or closed.

// handlerRows are a handler's rows: each call that may read the connection holds it as
// handlerTx's statements do, and an error reading them is a failure (handlerTx.fail). Rows the
// claim ended under are left unread: their connection was busy with them, so the claim closed
// it rather than pooling it.
type handlerRows struct {
	h      *handlerTx
	rows   pgx.Rows // nil when the query was refused (err)
	err    error
	closed bool // read to the end or closed: pgx closed them, and nothing more is read
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

// Close closes the rows, reading what is left. Rows already read to the end or closed send
// nothing, and a refusal (the claim's phase ended) is no failure: Close only tidies up.
func (r *handlerRows) Close() {
	if r.err != nil || r.closed {
		return
	}
	if _, err := r.h.turn(); err != nil {
		r.err = err
		return
	}
	defer r.h.done()
	r.closed = true
	r.rows.Close()
	r.h.fail(r.rows.Err())
}

func (r *handlerRows) Err() error {
	if r.err != nil || r.rows == nil {
		return r.err
	}
	return r.rows.Err()
}

func (r *handlerRows) Next() bool {
	if r.closed || !r.hold() {
		return false
	}
	defer r.h.done()
	if r.rows.Next() {
		return true
	}
	r.closed = true
	r.h.fail(r.rows.Err())
	return false
}

func (r *handlerRows) Scan(dest ...any) error {
	if !r.hold() {
		return r.err
	}
	defer r.h.done()
	err := r.rows.Scan(dest...)
	r.h.fail(err)
	return err
}

func (r *handlerRows) Values() ([]any, error) {
	if !r.hold() {
		return nil, r.err
	}
	defer r.h.done()
	v, err := r.rows.Values()
	r.h.fail(err)
	return v, err
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

// handlerRow is QueryRow's row: Scan reads it only while the claim's transaction is open. Its
// error is a failure (handlerTx.fail), pgx.ErrNoRows excepted.
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
	err := r.row.Scan(dest...)
	r.h.fail(err)
	return err
}

// handlerBatch is SendBatch's results, read only while the claim's transaction is open. An
// error reading them is a failure (handlerTx.fail).
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
	tag, err := b.br.Exec()
	b.h.fail(err)
	return tag, err
}

func (b *handlerBatch) Query() (pgx.Rows, error) {
	if err := b.hold(); err != nil {
		return &handlerRows{err: err}, err
	}
	defer b.h.done()
	rows, err := b.br.Query()
	b.h.fail(err)
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

// Close reads what is left of the results; a refusal (the claim's phase ended) is no failure:
// Close only tidies up.
func (b *handlerBatch) Close() error {
	if b.err != nil {
		return b.err
	}
	if _, err := b.h.turn(); err != nil {
		b.err = err
		return err
	}
	defer b.h.done()
	err := b.br.Close()
	b.h.fail(err)
	return err
}
