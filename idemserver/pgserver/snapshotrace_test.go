package pgserver_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/pgserver"
	"github.com/jackc/pgx/v5/pgxpool"
)

// gateLock is the advisory lock a test holds to stop claims between their statement's
// snapshot and the key's lock (holdClaims).
const gateLock = 4242

// holdClaims makes the claims of pool's connections wait, once their claim statement has
// taken its snapshot and before it tries the key's lock, for as long as gateLock is held: a
// function of the pool's own schema, searched before pg_catalog, stands in for
// pg_try_advisory_xact_lock. It waits on a lock rather than on a row so that it works under
// every isolation level (a snapshot would never see the row change).
func holdClaims(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `CREATE FUNCTION pg_try_advisory_xact_lock(id bigint) RETURNS boolean
		LANGUAGE plpgsql VOLATILE AS $$
		BEGIN
			IF EXISTS (SELECT 1 FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND classid = 0 AND objid = 4242 AND objsubid = 1 AND granted) THEN
				PERFORM pg_catalog.pg_advisory_lock_shared(4242);
				PERFORM pg_catalog.pg_advisory_unlock_shared(4242);
			END IF;
			RETURN pg_catalog.pg_try_advisory_xact_lock(id);
		END $$`); err != nil {
		t.Fatal(err)
	}
}

// TestClaimAfterItsSnapshotMissedTheAnswer: a retry's claim statement takes its snapshot
// while the key's first request is still running, and tries the key's lock only after that
// request committed its answer and let the lock go. The snapshot has no row for the key and
// the lock is free, yet the key is not fresh: the retry must replay the committed answer, the
// handler having run once, under each isolation level the claim's transaction may have (the
// database's default_transaction_isolation). In read committed the claim reads the row again
// in a second statement; above it, where that statement would see the same snapshot, it
// begins again.
func TestClaimAfterItsSnapshotMissedTheAnswer(t *testing.T) {
	for _, iso := range []string{"read committed", "repeatable read", "serializable"} {
		t.Run(strings.ReplaceAll(iso, " ", "_"), func(t *testing.T) {
			var runs atomic.Int32
			started, finish := make(chan struct{}), make(chan struct{})
			s := newTxServerWith(t, func(c *pgxpool.Config) {
				c.ConnConfig.RuntimeParams["default_transaction_isolation"] = iso
				c.ConnConfig.RuntimeParams["search_path"] += ", pg_catalog" // holdClaims' function first
			}, func(w http.ResponseWriter, r *http.Request) {
				tx, err := pgserver.MustTx(r.Context())
				if err != nil {
					t.Error(err)
					return
				}
				if runs.Add(1) == 1 {
					close(started)
					<-finish
				}
				if _, err := tx.Exec(r.Context(), "INSERT INTO payments (reference, idem_key, amount) VALUES ('order-1', $1, 100)", r.Header.Get("Idempotency-Key")); err != nil {
					t.Error(err)
				}
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write([]byte(`{"id":"pay_1"}`))
			})
			var once sync.Once
			release := func() { once.Do(func() { close(finish) }) }
			t.Cleanup(release) // before the server's Close, which waits for the handler
			holdClaims(t, s.pool)
			ctx := context.Background()
			type answer struct {
				code   int
				header http.Header
				body   string
			}
			send := func(out chan<- answer) {
				code, h, body := s.send(t, http.MethodPost, "/v1/payments", "k-snapshot", `{"amount":100}`)
				out <- answer{code, h, body}
			}
			first, retry := make(chan answer, 1), make(chan answer, 1)
			go send(first)
			<-started // the first request holds the key, its row not committed
			gate, err := s.pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer gate.Release()
			if _, err := gate.Exec(ctx, "SELECT pg_catalog.pg_advisory_lock($1)", gateLock); err != nil {
				t.Fatal(err)
			}
			go send(retry)
			waitForHeldClaim(t, s.pool)
			release()
			a := <-first
			if a.code != http.StatusCreated || a.body != `{"id":"pay_1"}` {
				t.Fatalf("first request: %d %s", a.code, a.body)
			}
			if _, err := gate.Exec(ctx, "SELECT pg_catalog.pg_advisory_unlock($1)", gateLock); err != nil {
				t.Fatal(err)
			}
			b := <-retry
			if b.code != http.StatusCreated || b.body != a.body || b.header.Get(idemserver.ReplayedHeader) == "" {
				t.Errorf("retry: %d %s (replayed %q), want the first answer replayed", b.code, b.body, b.header.Get(idemserver.ReplayedHeader))
			}
			if n := runs.Load(); n != 1 {
				t.Errorf("handler ran %d times, want 1", n)
			}
			if n := s.count(t, "SELECT count(*) FROM payments"); n != 1 {
				t.Errorf("%d payments, want 1", n)
			}
		})
	}
}

// waitForHeldClaim waits until a claim statement waits on gateLock (holdClaims), its snapshot
// taken.
func waitForHeldClaim(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_catalog.pg_stat_activity
			WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' AND query LIKE '%pg_current_snapshot%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no claim waited on the gate")
}

// TestAnswerNeverOverwritesACommittedRow: should a row for the key be committed while the
// claim runs, by whatever means the claim's check did not see (here the handler's own second
// connection), the answer's INSERT fails on the primary key instead of overwriting it: the
// claim's transaction, the handler's payment with it, rolls back, the request is answered 503
// (nothing stored: retry), and the committed row stays as it was.
func TestAnswerNeverOverwritesACommittedRow(t *testing.T) {
	var s *txServer
	s = newTxServer(t, func(w http.ResponseWriter, r *http.Request) {
		tx, err := pgserver.MustTx(r.Context())
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := tx.Exec(r.Context(), "INSERT INTO payments (reference, idem_key, amount) VALUES ('order-2', 'k-taken', 100)"); err != nil {
			t.Error(err)
		}
		if _, err := s.pool.Exec(r.Context(), `INSERT INTO idem_server_keys (tenant, operation, key, fingerprint, state, created_at,
			locked_until, expires_at, response_status, response_header, response_body)
			SELECT 'acct_1', 'POST /v1/payments', 'k-taken', '\x00', 2, now(), now(), now() + interval '1 day', 201, '{}', 'other'`); err != nil {
			t.Error(err)
		}
		w.WriteHeader(http.StatusCreated)
	})
	code, _, body := s.send(t, http.MethodPost, "/v1/payments", "k-taken", `{"amount":100}`)
	if code != http.StatusServiceUnavailable {
		t.Errorf("answer: %d %s, want 503", code, body)
	}
	if n := s.count(t, "SELECT count(*) FROM payments"); n != 0 {
		t.Errorf("%d payments, want 0 (rolled back with the claim)", n)
	}
	if n := s.count(t, "SELECT count(*) FROM idem_server_keys WHERE key = 'k-taken' AND response_body = 'other' AND fingerprint = '\\x00'"); n != 1 {
		t.Errorf("the committed row was changed (%d rows as written, want 1)", n)
	}
}
