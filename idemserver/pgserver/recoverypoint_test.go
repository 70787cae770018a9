package pgserver_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/pgserver"
)

// TestEmptyCheckpointIsRefused: Checkpoint(r, "") returns ErrEmptyRecoveryPoint and commits
// nothing, so a crash after it rolls phase 1 back and the retry starts afresh at once. Before,
// it committed phase 1 with recovery point "", and the takeover after the lease, told ""
// (a fresh start), ran phase 1 again: two payment rows for one key (adversarial run). A named
// point commits phase 1 and the retry resumes after the lease, as TestCheckpointResume shows.
func TestEmptyCheckpointIsRefused(t *testing.T) {
	for _, tc := range []struct {
		point       string
		wantErr     error
		wantPending int // payment rows left by the crash
		wantRetry   int // the retry's status right after the crash
	}{
		{point: "", wantErr: idemserver.ErrEmptyRecoveryPoint, wantPending: 0, wantRetry: http.StatusCreated},
		{point: "created", wantErr: nil, wantPending: 1, wantRetry: http.StatusConflict},
	} {
		t.Run("point "+tc.point, func(t *testing.T) {
			var (
				runs  atomic.Int32
				cpErr error
			)
			s := newTxServer(t, func(w http.ResponseWriter, r *http.Request) {
				run := runs.Add(1)
				ctx := r.Context()
				if idemserver.RecoveryPoint(r) == "" {
					tx, err := pgserver.MustTx(ctx)
					if !assert.NoError(t, err) {
						return
					}
					_, err = tx.Exec(ctx, "INSERT INTO payments (reference, idem_key, amount, status) VALUES ('r1', 'k', 1, 'pending')")
					assert.NoError(t, err)
					if run == 1 {
						cpErr = idemserver.Checkpoint(r, tc.point)
						panic(http.ErrAbortHandler) // the process dies in phase 2
					}
				}
				w.WriteHeader(http.StatusCreated)
			})
			code, _, _ := s.send(t, "POST", "/v1/payments", "k-point", "{}")
			require.Equal(t, 0, code, "the crashed request's connection is dropped")
			if tc.wantErr != nil {
				assert.ErrorIs(t, cpErr, tc.wantErr)
			} else {
				assert.NoError(t, cpErr)
			}
			assert.Equal(t, tc.wantPending, s.count(t, "SELECT count(*) FROM payments"))
			code, _, _ = s.send(t, "POST", "/v1/payments", "k-point", "{}")
			assert.Equal(t, tc.wantRetry, code)
			s.clock.Advance(2 * time.Minute) // past the lease
			code, h, _ := s.send(t, "POST", "/v1/payments", "k-point", "{}")
			assert.Equal(t, http.StatusCreated, code)
			assert.Equal(t, map[bool]string{true: "true", false: ""}[tc.wantRetry == http.StatusCreated], h.Get(idemserver.ReplayedHeader))
			assert.Equal(t, 1, s.count(t, "SELECT count(*) FROM payments"), "payment rows for one key")
			assert.EqualValues(t, 2, runs.Load(), "handler runs")
		})
	}

	t.Run("backend", func(t *testing.T) { // the claim refuses it too, before it sends anything
		ctx := context.Background()
		b := pgserver.NewWithOptions(testPool(t, 2), pgserver.Options{MaxClockSkew: -1})
		now := time.Now()
		sc := idemserver.Scope{Tenant: "acct_1", Operation: "POST /v1/payments", Key: "k-empty"}
		c, rec, err := b.Claim(ctx, idemserver.ClaimRequest{Scope: sc, Fingerprint: []byte("fp"), Now: now, Lease: time.Minute})
		require.NoError(t, err)
		require.Nil(t, rec)
		t.Cleanup(func() { _ = c.Release(ctx) }) // before the pool closes, which waits for the claim's connection
		hctx := c.Context(ctx)
		require.ErrorIs(t, c.Checkpoint(hctx, "", now, time.Minute), idemserver.ErrEmptyRecoveryPoint)
		tx, err := pgserver.MustTx(hctx) // the handler's transaction is still open
		require.NoError(t, err)
		var one int
		require.NoError(t, tx.QueryRow(hctx, "SELECT 1").Scan(&one))
		require.NoError(t, c.Release(hctx))
		rec, err = b.Lookup(ctx, sc, now) // nothing was committed: the key is free
		require.NoError(t, err)
		assert.Nil(t, rec)
	})
}

// TestResumedOwnersDeathKeepsTheLease: a request that took over a checkpointed key holds it
// for Config.Lease from the takeover, durably: when it dies in turn (a panic, its connection
// lost as in a crash), retries get 409 until that lease passes, as after the first owner's
// death, and only then resume. Before, the takeover's lease was written in the phase's
// transaction, which the death rolled back, restoring the first owner's long-past lease: the
// next retry resumed at once, calling the third party again while the dead resumer's call may
// still have been settling (adversarial run).
func TestResumedOwnersDeathKeepsTheLease(t *testing.T) {
	for _, tc := range []struct {
		death    string
		wantDead int // what the resumer's request gets
	}{
		{death: "panic", wantDead: 0}, // net/http drops the connection
		{death: "connection lost", wantDead: http.StatusServiceUnavailable},
	} {
		t.Run(tc.death, func(t *testing.T) {
			var runs, foreign atomic.Int32
			var s *txServer
			s = newTxServer(t, func(w http.ResponseWriter, r *http.Request) {
				run := runs.Add(1)
				ctx := r.Context()
				if idemserver.RecoveryPoint(r) == "" {
					tx, err := pgserver.MustTx(ctx)
					if !assert.NoError(t, err) {
						return
					}
					_, err = tx.Exec(ctx, "INSERT INTO payments (reference, idem_key, amount, status) VALUES ('r1', 'k', 1, 'pending')")
					assert.NoError(t, err)
					assert.NoError(t, idemserver.Checkpoint(r, "created"))
				}
				foreign.Add(1) // the card network, with its own idempotency key
				tx, err := pgserver.MustTx(ctx)
				if !assert.NoError(t, err) {
					return
				}
				switch {
				case run == 1, run == 2 && tc.death == "panic":
					panic(http.ErrAbortHandler)
				case run == 2: // the claim's connection is lost, as when the process is killed
					var gone bool
					assert.NoError(t, s.pool.QueryRow(ctx, "SELECT pg_terminate_backend($1, 10000)", tx.Conn().PgConn().PID()).Scan(&gone))
					assert.True(t, gone)
				default:
					_, err = tx.Exec(ctx, "UPDATE payments SET status = 'succeeded' WHERE reference = 'r1'")
					assert.NoError(t, err)
				}
				w.WriteHeader(http.StatusCreated)
			})
			// A new connection for each request: on a reused one, net/http's client resends a
			// request with an Idempotency-Key whose connection was dropped (the panic).
			s.Client().Transport.(*http.Transport).DisableKeepAlives = true
			post := func() int {
				code, _, _ := s.send(t, "POST", "/v1/payments", "k-resume", "{}")
				return code
			}
			require.Equal(t, 0, post(), "the first owner dies after its checkpoint")
			assert.Equal(t, http.StatusConflict, post(), "retry inside the first owner's lease")
			s.clock.Advance(time.Minute + time.Second)
			require.Equal(t, tc.wantDead, post(), "the resumer dies")
			s.clock.Advance(time.Second)
			assert.Equal(t, http.StatusConflict, post(), "retry inside the resumer's lease")
			s.clock.Advance(time.Minute)
			assert.Equal(t, http.StatusCreated, post(), "retry after the resumer's lease")
			assert.EqualValues(t, 3, runs.Load(), "handler runs")
			assert.EqualValues(t, 3, foreign.Load(), "third-party calls")
			assert.Equal(t, 1, s.count(t, "SELECT count(*) FROM payments WHERE reference = 'r1' AND status = 'succeeded'"))
			assert.Equal(t, 1, s.count(t, "SELECT count(*) FROM payments"))
			assert.EqualValues(t, 2, s.mw.Stats().Takeovers)
		})
	}
}
