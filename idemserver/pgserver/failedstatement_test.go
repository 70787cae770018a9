package pgserver_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/pgserver"
)

const (
	entriesSchema = `CREATE TABLE entries (id bigserial PRIMARY KEY, ref text NOT NULL, account text NOT NULL, amount bigint NOT NULL)`
	debitSQL      = "INSERT INTO entries (ref, account, amount) VALUES ('t1', 'A', -100)"
	creditSQL     = "INSERT INTO entries (ref, account, amount) VALUES ('t1', 'B', 100)"
)

// blockingSource is a CopyFromSource whose first Next waits for release: the CopyFrom holds
// the claim's connection meanwhile.
type blockingSource struct{ inside, release chan struct{} }

func (s *blockingSource) Next() bool {
	close(s.inside)
	<-s.release
	return false
}
func (s *blockingSource) Values() ([]any, error) { return nil, nil }
func (s *blockingSource) Err() error             { return nil }

// TestFailedStatementFailsTheClaim: a transfer's debit succeeds and its credit fails; the
// handler answers the error (500). However the credit failed, the claim's transaction is rolled
// back with nothing stored (503: retry), as PostgreSQL does with a transaction one of whose
// statements it refused, and the retry transfers once. Before, a statement that failed without
// reaching PostgreSQL (its context done, the connection busy with another goroutine's
// statement, the claim's transaction ended, an argument that cannot be encoded) left the
// transaction committable, and the middleware committed the debit without its credit, with
// the 500 as the key's answer (adversarial run). A failure inside a savepoint is the
// savepoint's: rolled back, the transaction goes on; left open or released, it fails the
// claim. pgx.ErrNoRows is a result, not a failure.
func TestFailedStatementFailsTheClaim(t *testing.T) {
	for _, tc := range []struct {
		name       string
		checkpoint bool // the handler checkpoints before the debit
		credit     func(ctx context.Context, r *http.Request, tx, before pgx.Tx) error
		want       int // the first request's status
	}{
		{name: "context done", want: http.StatusServiceUnavailable,
			credit: func(ctx context.Context, _ *http.Request, tx, _ pgx.Tx) error {
				ctx, cancel := context.WithCancel(ctx)
				cancel() // the client went away, or a deadline passed
				_, err := tx.Exec(ctx, creditSQL)
				return err
			}},
		{name: "connection busy", want: http.StatusServiceUnavailable,
			credit: func(ctx context.Context, _ *http.Request, tx, _ pgx.Tx) error {
				src := &blockingSource{inside: make(chan struct{}), release: make(chan struct{})}
				copied := make(chan error, 1)
				go func() { // another goroutine's statement holds the connection
					_, err := tx.CopyFrom(context.Background(), pgx.Identifier{"entries"}, []string{"ref", "account", "amount"}, src)
					copied <- err
				}()
				<-src.inside
				_, err := tx.Exec(ctx, creditSQL)
				close(src.release)
				if cerr := <-copied; cerr != nil {
					return cerr
				}
				return err
			}},
		{name: "argument not encodable", want: http.StatusServiceUnavailable,
			credit: func(ctx context.Context, _ *http.Request, tx, _ pgx.Tx) error {
				_, err := tx.Exec(ctx, "INSERT INTO entries (ref, account, amount) VALUES ('t1', 'B', $1)", make(chan int))
				return err
			}},
		{name: "a Tx kept across a checkpoint", checkpoint: true, want: http.StatusServiceUnavailable,
			credit: func(ctx context.Context, _ *http.Request, _, before pgx.Tx) error {
				_, err := before.Exec(ctx, creditSQL) // the first phase's, ended by the checkpoint
				return err
			}},
		{name: "savepoint left open", want: http.StatusServiceUnavailable,
			credit: func(ctx context.Context, _ *http.Request, tx, _ pgx.Tx) error {
				sp, err := tx.Begin(ctx)
				if err != nil {
					return err
				}
				cctx, cancel := context.WithCancel(ctx)
				cancel()
				_, err = sp.Exec(cctx, creditSQL)
				return err
			}},
		{name: "savepoint released after its statement failed", want: http.StatusServiceUnavailable,
			credit: func(ctx context.Context, _ *http.Request, tx, _ pgx.Tx) error {
				sp, err := tx.Begin(ctx)
				if err != nil {
					return err
				}
				cctx, cancel := context.WithCancel(ctx)
				cancel()
				_, _ = sp.Exec(cctx, creditSQL) // ignored: the handler releases the savepoint anyway
				return sp.Commit(ctx)
			}},
		{name: "statement refused by PostgreSQL", want: http.StatusServiceUnavailable,
			credit: func(ctx context.Context, _ *http.Request, tx, _ pgx.Tx) error {
				_, err := tx.Exec(ctx, "INSERT INTO entries (ref, account, amount) VALUES ('t1', NULL, 100)")
				return err
			}},
		{name: "savepoint rolled back, then the credit", want: http.StatusCreated,
			credit: func(ctx context.Context, _ *http.Request, tx, _ pgx.Tx) error {
				sp, err := tx.Begin(ctx)
				if err != nil {
					return err
				}
				defer func() { _ = sp.Rollback(ctx) }() // after the Rollback below: ErrTxClosed, no failure
				cctx, cancel := context.WithCancel(ctx)
				cancel()
				if _, err := sp.Exec(cctx, creditSQL); err == nil {
					return nil
				}
				if err := sp.Rollback(ctx); err != nil {
					return err
				}
				_, err = tx.Exec(ctx, creditSQL)
				return err
			}},
		{name: "rows closed after a checkpoint", want: http.StatusCreated,
			credit: func(ctx context.Context, r *http.Request, tx, _ pgx.Tx) error {
				rows, err := tx.Query(ctx, "SELECT id FROM entries")
				if err != nil {
					return err
				}
				defer rows.Close() // after the checkpoint: refused, and no failure
				for rows.Next() {
				}
				if err := idemserver.Checkpoint(r, "debited"); err != nil {
					return err
				}
				next, err := pgserver.MustTx(ctx)
				if err != nil {
					return err
				}
				_, err = next.Exec(ctx, creditSQL)
				return err
			}},
		// What PostgreSQL itself reported, it tracks: a handler that recovers by SQL has a
		// transaction it commits. Before, the expected unique violation failed the claim
		// and every attempt was 503 (adversarial run).
		{name: "refused statement recovered with ROLLBACK TO SAVEPOINT in SQL", want: http.StatusCreated,
			credit: func(ctx context.Context, _ *http.Request, tx, _ pgx.Tx) error {
				if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, "INSERT INTO entries (ref, account, amount) VALUES ('t1', NULL, 100)"); err == nil {
					return errors.New("the NULL account was accepted")
				}
				if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, creditSQL)
				return err
			}},
		// A value the handler could not scan: PostgreSQL never learns of it, and a handler
		// answering it with a 500 would commit the debit with it (adversarial run). A NULL-safe
		// scan (or COALESCE) is the handler's way out.
		{name: "a NULL that does not scan into an int64", want: http.StatusServiceUnavailable,
			credit: func(ctx context.Context, _ *http.Request, tx, _ pgx.Tx) error {
				var top int64
				if err := tx.QueryRow(ctx, "SELECT max(amount) FROM entries WHERE account = 'none'").Scan(&top); err == nil {
					return errors.New("a NULL scanned into an int64")
				}
				_, err := tx.Exec(ctx, creditSQL)
				return err
			}},
		{name: "no rows is a result", want: http.StatusCreated,
			credit: func(ctx context.Context, _ *http.Request, tx, _ pgx.Tx) error {
				var id int64
				if err := tx.QueryRow(ctx, "SELECT id FROM entries WHERE account = 'B'").Scan(&id); !errors.Is(err, pgx.ErrNoRows) {
					return err
				}
				_, err := tx.Exec(ctx, creditSQL)
				return err
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int32
			s := newTxServer(t, func(w http.ResponseWriter, r *http.Request) {
				run := runs.Add(1)
				ctx := r.Context()
				before, err := pgserver.MustTx(ctx)
				if !assert.NoError(t, err) {
					return
				}
				if tc.checkpoint && idemserver.RecoveryPoint(r) == "" {
					assert.NoError(t, idemserver.Checkpoint(r, "begun"))
				}
				tx, err := pgserver.MustTx(ctx)
				if !assert.NoError(t, err) {
					return
				}
				_, err = tx.Exec(ctx, debitSQL)
				assert.NoError(t, err)
				if run == 1 {
					err = tc.credit(ctx, r, tx, before)
				} else {
					_, err = tx.Exec(ctx, creditSQL)
				}
				if err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				w.WriteHeader(http.StatusCreated)
			})
			_, err := s.pool.Exec(context.Background(), entriesSchema)
			require.NoError(t, err)
			entries := func() int { return s.count(t, "SELECT count(*) FROM entries") }

			code, h, body := s.send(t, "POST", "/v1/payments", "k-transfer", "{}")
			require.Equal(t, tc.want, code, body)
			if tc.want == http.StatusCreated {
				assert.Equal(t, 2, entries())
				code, h, _ = s.send(t, "POST", "/v1/payments", "k-transfer", "{}")
				assert.Equal(t, http.StatusCreated, code)
				assert.Equal(t, "true", h.Get(idemserver.ReplayedHeader))
				assert.EqualValues(t, 1, runs.Load())
				return
			}
			assert.Contains(t, body, idemserver.ProblemUnavailable)
			assert.Equal(t, "1", h.Get("Retry-After"))
			assert.Equal(t, 0, entries(), "nothing of the failed transfer stands")
			status, _, statusBody := s.send(t, "GET", "/v1/payments/operations/k-transfer", "", "")
			if tc.checkpoint { // the checkpoint committed: resumed after its lease
				assert.Equal(t, http.StatusAccepted, status, statusBody)
				code, _, _ = s.send(t, "POST", "/v1/payments", "k-transfer", "{}")
				assert.Equal(t, http.StatusConflict, code)
				s.clock.Advance(2 * time.Minute)
			} else {
				assert.Equal(t, http.StatusNotFound, status, statusBody)
			}
			code, h, _ = s.send(t, "POST", "/v1/payments", "k-transfer", "{}")
			assert.Equal(t, http.StatusCreated, code)
			assert.Equal(t, "", h.Get(idemserver.ReplayedHeader))
			assert.Equal(t, 2, entries())
			assert.Equal(t, 0, s.count(t, "SELECT coalesce(sum(amount), 0) FROM entries"))
			assert.EqualValues(t, 2, runs.Load())
		})
	}
}
