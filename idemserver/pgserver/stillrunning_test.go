package pgserver_test

import (
	"context"
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

// TestHandlerStillRunningRollsBack: when the middleware comes to store the answer while a
// statement of the handler still holds the claim's connection, the handler returned while part
// of it runs on: an http.TimeoutHandler inside the middleware answered at its deadline, or the
// handler left a goroutine behind. The answer cannot account for that work, so the claim's
// transaction is rolled back once the statement ends (ErrHandlerStillRunning): 503, nothing
// stored, and the retry transfers once. Before, the middleware stored TimeoutHandler's 503 (or
// the handler's 201) and committed the writes made so far with it (adversarial run). Not
// detected: a handler between two statements then (see the package documentation).
func TestHandlerStillRunningRollsBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		// wrap is what the middleware runs, around the handler; leave runs the first attempt's
		// last statement so that it is still running when the middleware stores the answer.
		wrap  func(h http.Handler) http.Handler
		leave func(t *testing.T, tx pgx.Tx)
	}{
		{name: "http.TimeoutHandler inside the middleware",
			wrap: func(h http.Handler) http.Handler { return http.TimeoutHandler(h, 200*time.Millisecond, "timed out") },
			leave: func(t *testing.T, tx pgx.Tx) {
				_, err := tx.Exec(context.Background(), // in flight when TimeoutHandler answers, at 200 ms
					"INSERT INTO entries (ref, account, amount) SELECT 't1', 'B', 100 FROM pg_sleep(0.5)")
				assert.NoError(t, err)
			}},
		{name: "a goroutine the handler left",
			wrap: func(h http.Handler) http.Handler { return h },
			leave: func(t *testing.T, tx pgx.Tx) {
				// Its one Next holds the claim's connection, then ends with no row 300 ms later.
				src := &blockingSource{inside: make(chan struct{}), release: make(chan struct{})}
				time.AfterFunc(300*time.Millisecond, func() { close(src.release) })
				go func() {
					_, err := tx.CopyFrom(context.Background(), pgx.Identifier{"entries"}, []string{"ref", "account", "amount"}, src)
					assert.NoError(t, err)
				}()
				<-src.inside // the goroutine's statement holds the connection as the handler returns
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int32
			s := newTxServer(t, tc.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				run := runs.Add(1)
				ctx := r.Context()
				tx, err := pgserver.MustTx(ctx)
				if !assert.NoError(t, err) {
					return
				}
				_, err = tx.Exec(ctx, debitSQL)
				assert.NoError(t, err)
				if run == 1 {
					tc.leave(t, tx)
				} else {
					_, err = tx.Exec(ctx, creditSQL)
					assert.NoError(t, err)
				}
				w.WriteHeader(http.StatusCreated)
			})).ServeHTTP)
			_, err := s.pool.Exec(context.Background(), entriesSchema)
			require.NoError(t, err)
			entries := func() int { return s.count(t, "SELECT count(*) FROM entries") }

			code, h, body := s.send(t, "POST", "/v1/payments", "k-transfer", "{}")
			assert.Equal(t, http.StatusServiceUnavailable, code)
			assert.Contains(t, body, idemserver.ProblemUnavailable)
			assert.Equal(t, "1", h.Get("Retry-After"))
			assert.Equal(t, 0, entries(), "nothing of the first attempt stands")
			status, _, statusBody := s.send(t, "GET", "/v1/payments/operations/k-transfer", "", "")
			assert.Equal(t, http.StatusNotFound, status, statusBody)
			code, h, _ = s.send(t, "POST", "/v1/payments", "k-transfer", "{}")
			assert.Equal(t, http.StatusCreated, code)
			assert.Equal(t, "", h.Get(idemserver.ReplayedHeader))
			assert.Equal(t, 2, entries())
			assert.Equal(t, 0, s.count(t, "SELECT coalesce(sum(amount), 0) FROM entries"))
			assert.EqualValues(t, 2, runs.Load())
		})
	}
}
