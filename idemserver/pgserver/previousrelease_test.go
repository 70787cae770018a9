package pgserver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/pgserver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The previous release's claim and answer statements (e4e68a8), as they run in a fleet being
// upgraded: its claim inserts the processing row at once (ON CONFLICT DO NOTHING, under the
// key's advisory lock) and its answer updates that row.
const (
	previousClaimSQL = `WITH l AS (
	SELECT CASE WHEN pg_try_advisory_xact_lock($8) THEN pg_try_advisory_lock($8) ELSE false END AS got
), ins AS (
	INSERT INTO idem_server_keys (tenant, operation, key, fingerprint, state, owner, created_at, locked_until)
	SELECT $1, $2, $3, $4, 1, $5, $6, $7 FROM l WHERE l.got
	ON CONFLICT (tenant, operation, key) DO NOTHING
	RETURNING pg_current_xact_id()::text AS xid
)
SELECT l.got, (SELECT xid FROM ins), k.state
FROM l LEFT JOIN idem_server_keys k ON k.tenant = $1 AND k.operation = $2 AND k.key = $3`
	previousCompleteSQL = `WITH u AS (
	UPDATE idem_server_keys SET state = 2, owner = NULL, expires_at = $5, response_status = $6, response_header = $7, response_body = $8
	WHERE tenant = $1 AND operation = $2 AND key = $3 AND owner = $4 RETURNING 1
)
SELECT CASE
	WHEN pg_current_xact_id_if_assigned()::text IS DISTINCT FROM $9 THEN ('pgserver: claim transaction ended ' || clock_timestamp())::int = 0
	WHEN 1 / ((SELECT count(*) FROM u) = 1)::int = 1 THEN set_config('synchronous_commit', 'on', true) = 'on' AND pg_advisory_unlock($10)
END`
)

// previousRelease is one request of the previous release for key: it executes (the payment
// and the answer, committed together) when its claim inserted the row, and otherwise reports
// whether the key has its answer (a replay) or is in progress (final false: try again). A
// claim that held the lock but found a row committed after its snapshot reads the row again
// under the lock, as that release's claimExisting did.
func previousRelease(ctx context.Context, pool *pgxpool.Pool, key string) (executed, final bool, err error) {
	s := idemserver.Scope{Tenant: "acct_1", Operation: "POST /v1/payments", Key: key}
	lock := pgserver.LockID(s)
	pc, err := pool.Acquire(ctx)
	if err != nil {
		return false, false, err
	}
	defer pc.Release()
	tx, err := pc.Begin(ctx)
	if err != nil {
		return false, false, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var (
		got   bool
		xid   *string
		state *int16
	)
	now := time.Now()
	if err := tx.QueryRow(ctx, previousClaimSQL, s.Tenant, s.Operation, s.Key, []byte("fp"), uuid.NewString(), now, now.Add(time.Minute), lock).
		Scan(&got, &xid, &state); err != nil {
		return false, false, err
	}
	if got && xid != nil {
		var owner string
		if err := tx.QueryRow(ctx, "SELECT owner FROM idem_server_keys WHERE tenant = $1 AND operation = $2 AND key = $3", s.Tenant, s.Operation, s.Key).Scan(&owner); err != nil {
			return false, false, err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO payments (reference, idem_key, amount) VALUES ('order', $1, 100)", key); err != nil {
			return false, false, err
		}
		var unlocked *bool
		if err := tx.QueryRow(ctx, previousCompleteSQL, s.Tenant, s.Operation, s.Key, owner, now.Add(time.Hour), 201, "{}",
			[]byte(`{"release":"previous"}`), *xid, lock).Scan(&unlocked); err != nil {
			return false, false, err
		}
		return true, true, tx.Commit(ctx)
	}
	if got && (state == nil || *state != 2) { // the row committed after the snapshot, read under the lock
		if err := tx.QueryRow(ctx, "SELECT state FROM idem_server_keys WHERE tenant = $1 AND operation = $2 AND key = $3", s.Tenant, s.Operation, s.Key).Scan(&state); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return false, false, err
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		return false, false, err
	}
	if got {
		if _, err := pc.Exec(ctx, "SELECT pg_advisory_unlock($1)", lock); err != nil {
			return false, false, err
		}
	}
	return false, state != nil && *state == 2, nil
}

// TestPreviousReleaseBesideThisOne: during an upgrade, servers of the previous release (which
// inserts a key's row at the claim) and of this one (which writes it once, with the answer)
// share the table. Each key is sent by eight concurrent clients, four to each release, each
// until it has the key's answer: every key's payment is made exactly once, and every answer
// this release gives is the payment's (executed or replayed, whichever release made it).
func TestPreviousReleaseBesideThisOne(t *testing.T) {
	pool := testPool(t, 24)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, paymentsSchema); err != nil {
		t.Fatal(err)
	}
	backend := pgserver.New(pool)
	mw, err := idemserver.New(idemserver.Config{Backend: backend, Tenant: bearerTenant, Lease: time.Minute,
		Fingerprint: func(string, string, []byte) []byte { return []byte("fp") }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, err := pgserver.MustTx(r.Context())
		if err == nil {
			_, err = tx.Exec(r.Context(), "INSERT INTO payments (reference, idem_key, amount) VALUES ('order', $1, 100)", r.Header.Get("Idempotency-Key"))
		}
		if err != nil {
			t.Error(err)
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"release":"this"}`))
	})))
	defer srv.Close()
	const keys, perRelease = 12, 4
	var wg sync.WaitGroup
	for k := range keys {
		key := fmt.Sprintf("upgrade-%d-%s", k, uuid.NewString())
		for range perRelease {
			wg.Go(func() {
				for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
					_, final, err := previousRelease(ctx, pool, key)
					if err != nil {
						t.Errorf("%s: previous release: %v", key, err)
						return
					}
					if final {
						return
					}
				}
				t.Errorf("%s: previous release never got the answer", key)
			})
			wg.Go(func() {
				for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
					req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/payments", strings.NewReader(`{"amount":100}`))
					req.Header.Set("Authorization", "Bearer acct_1")
					req.Header.Set("Idempotency-Key", key)
					resp, err := srv.Client().Do(req)
					if err != nil {
						t.Errorf("%s: %v", key, err)
						return
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					switch resp.StatusCode {
					case http.StatusConflict: // in progress
						continue
					case http.StatusCreated:
						if got := string(b); got != `{"release":"this"}` && got != `{"release":"previous"}` {
							t.Errorf("%s: answer %q", key, got)
						}
						return
					}
					t.Errorf("%s: %d %s", key, resp.StatusCode, b)
					return
				}
				t.Errorf("%s: this release never got the answer", key)
			})
		}
	}
	wg.Wait()
	rows, err := pool.Query(ctx, `SELECT k.key, k.state, (SELECT count(*) FROM payments p WHERE p.idem_key = k.key)
		FROM idem_server_keys k WHERE k.key LIKE 'upgrade-%'`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var (
			key      string
			state    int16
			payments int
		)
		if err := rows.Scan(&key, &state, &payments); err != nil {
			t.Fatal(err)
		}
		n++
		if state != 2 || payments != 1 {
			t.Errorf("%s: state %d, %d payments; want 2 and exactly 1", key, state, payments)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != keys {
		t.Errorf("%d keys stored, want %d", n, keys)
	}
	var previous int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM idem_server_keys WHERE response_body = '{"release":"previous"}'`).Scan(&previous); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d keys executed by the previous release, %d by this one", previous, keys-previous)
	var total int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM payments").Scan(&total); err != nil {
		t.Fatal(err)
	}
	if total != keys {
		t.Errorf("%d payments, want %d", total, keys)
	}
}
