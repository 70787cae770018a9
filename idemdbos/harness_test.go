package idemdbos_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemdbos"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore/pgstore"
)

// Kill points: where the first execution's process dies.
const (
	killNone       = ""
	killBeforeSend = "before the send"                               // the record is persisted, no byte has left
	killDuring     = "during the send"                               // the request reached the API, which then executes it
	killBeforeIdem = "after execution, before idem recorded it"      // the answer arrived, idem never saw it
	killBeforeDBOS = "after idem recorded, before DBOS checkpointed" // Do returned, the step never did
	statusPath     = "/v1/payments/operations/{key}"
	paymentsPath   = "/v1/payments"
)

// needPG returns the DSN of the test database. Without IDEM_TEST_PG_DSN the test is skipped,
// except under CI=true, where it fails: CI must run these tests.
func needPG(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("IDEM_TEST_PG_DSN")
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("IDEM_TEST_PG_DSN not set under CI=true: the DBOS tests need PostgreSQL (.ci/postgres.sh)")
		}
		t.Skip("IDEM_TEST_PG_DSN not set: skipping the DBOS tests on PostgreSQL (. .ci/postgres.sh && pg_start)")
	}
	return dsn
}

// dbosSchema is DBOS's system schema for this test binary: migrated once (by the first
// harness), shared by every test, each under an executor id of its own so that a launch
// recovers only its own test's workflows; dropped by TestMain.
var (
	dbosSchema  = "dbos_test_" + randomHex()
	dbosMigrate sync.Once
	dbosErr     error
)

func randomHex() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if dsn := os.Getenv("IDEM_TEST_PG_DSN"); dsn != "" {
		ctx := context.Background()
		if admin, err := pgxpool.New(ctx, dsn); err == nil {
			if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+dbosSchema+" CASCADE"); err != nil {
				fmt.Fprintln(os.Stderr, "drop schema:", err)
			}
			admin.Close()
		}
	}
	os.Exit(code)
}

// migrateDBOS creates DBOS's system schema once: NewContext migrates it.
func migrateDBOS(dsn string) error {
	dbosMigrate.Do(func() {
		d, err := dbos.NewContext(context.Background(), dbos.Config{AppName: "idemdbos-test", DatabaseURL: dsn,
			DatabaseSchema: dbosSchema, ApplicationVersion: "test", ExecutorID: "migrate",
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			dbosErr = err
			return
		}
		dbosErr = dbos.Shutdown(d, 10*time.Second)
	})
	return dbosErr
}

// order is the workflow's input: one business payment.
type order struct {
	Reference string `json:"reference"`
	Amount    int    `json:"amount"`
}

// post is one POST as it reached the API.
type post struct {
	key    string
	checks int // status checks the API had answered when the POST arrived
}

// harness is a fault-injecting payments API (idemtest) and a DBOS application whose process
// can die: one process at a time, each with its own DBOS context, idem client and pools, on
// one PostgreSQL database (DBOS's system schema and the idem keystore's schema, both new for
// the test). A process dies by DBOS's Shutdown at the kill point, which cancels its running
// workflow (nothing of the interrupted step is checkpointed, as after a crash); the next
// process launches DBOS on the same schema, which recovers the pending workflow and runs the
// step again.
type harness struct {
	t        *testing.T
	dsn      string
	executor string // DBOS executor id: the test's processes, one after another
	idemSch  string
	api      *idemtest.Handler
	url      string
	workflow func(dbos.Context, order) (string, error)

	mu       sync.Mutex
	kill     string
	dctx     dbos.Context
	payer    *idemdbos.Payer
	pool     *pgxpool.Pool
	starts   int // processes started
	runs     int // runs of the payment step
	posts    []post
	killed   bool
	dead     chan struct{} // closed when the killed process's Shutdown returned
	returned chan struct{} // closed when the first run's Do has returned
	steps    []idemdbos.Step
	errs     []error
}

func newHarness(t *testing.T, kill string, cfg idemtest.Config) *harness {
	t.Helper()
	dsn := needPG(t)
	require.NoError(t, migrateDBOS(dsn))
	suffix := randomHex()
	h := &harness{t: t, dsn: dsn, kill: kill, executor: "exec-" + suffix, idemSch: "idem_" + suffix,
		dead: make(chan struct{}), returned: make(chan struct{})}
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE SCHEMA "+h.idemSch)
	require.NoError(t, err)
	t.Cleanup(func() {
		h.mu.Lock()
		h.stop()
		h.mu.Unlock()
		if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+h.idemSch+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", h.idemSch, err)
		}
		admin.Close()
	})
	pool := h.keystorePool()
	require.NoError(t, pgstore.Migrate(ctx, pool))
	pool.Close()

	cfg.RetryAfter = -1 // "Retry-After: 0": no waiting in tests
	cfg.OnPayment = h.onPayment
	h.api = idemtest.NewHandler(cfg)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The API runs a request that arrived to its end even when the client hangs up,
		// as a payment API does once it has begun.
		h.api.ServeHTTP(w, r.WithContext(context.WithoutCancel(r.Context())))
	}))
	h.url = srv.URL
	t.Cleanup(func() { srv.Close(); h.api.Close() })
	h.workflow = h.payWorkflow
	return h
}

func (h *harness) keystorePool() *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(h.dsn)
	require.NoError(h.t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = h.idemSch
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(h.t, err)
	return pool
}

// start starts a process: pools, idem client on pgstore, DBOS context launched (which
// recovers the workflows a dead process left pending). h.mu is held.
func (h *harness) start() {
	ctx := context.Background()
	h.pool = h.keystorePool()
	store, err := pgstore.Open(ctx, h.pool, nil)
	require.NoError(h.t, err)
	c, err := idem.NewClient(idem.Config{BaseURL: h.url, KeyStatusURL: statusPath, Store: store,
		HTTPClient: &http.Client{Transport: h},
		Policy: idem.Policy{InitialDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond,
			AttemptTimeout: 5 * time.Second},
		Budget: idem.BudgetConfig{Disabled: true}})
	require.NoError(h.t, err)
	h.payer, err = idemdbos.New(idemdbos.Config{Client: c, App: "shop"})
	require.NoError(h.t, err)
	h.dctx, err = dbos.NewContext(ctx, dbos.Config{AppName: "idemdbos-" + h.executor, DatabaseURL: h.dsn,
		DatabaseSchema: dbosSchema, ApplicationVersion: "test", ExecutorID: h.executor,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(h.t, err)
	dbos.RegisterWorkflow(h.dctx, h.workflow, dbos.WithWorkflowName("pay-order"))
	h.starts++
	h.mu.Unlock()
	err = dbos.Launch(h.dctx) // recovery may run the step, which takes h.mu
	h.mu.Lock()
	require.NoError(h.t, err)
}

// stop ends the live process: DBOS, then idem's client, then the pool. h.mu is held.
func (h *harness) stop() {
	if h.dctx == nil {
		return
	}
	d := h.dctx
	h.mu.Unlock()
	err := dbos.Shutdown(d, 10*time.Second)
	h.mu.Lock()
	require.NoError(h.t, err)
	h.dctx = nil
	require.NoError(h.t, h.payer.Client().Close())
	h.pool.Close()
	h.payer, h.pool = nil, nil
}

// die kills the live process at a kill point: DBOS's Shutdown cancels its workflows, on a
// goroutine of its own since it waits for them. h.mu is held.
func (h *harness) die() {
	h.killed = true
	d := h.dctx
	go func() {
		_ = dbos.Shutdown(d, 10*time.Second)
		close(h.dead)
	}()
}

// onPayment runs on the API as a POST arrives. Killing during the send holds the request
// until the step's Do has returned, so that the answer cannot reach it.
func (h *harness) onPayment(r *http.Request) {
	h.mu.Lock()
	h.posts = append(h.posts, post{key: r.Header.Get("Idempotency-Key"), checks: h.api.KeyStatusChecks()})
	kill := len(h.posts) == 1 && h.kill == killDuring
	if kill {
		h.die()
	}
	h.mu.Unlock()
	if kill {
		h.wait(h.returned, "the killed run's Do to return")
	}
}

// RoundTrip is the processes' transport: it kills before the first POST leaves, or after
// its answer arrived and before idem reads it.
func (h *harness) RoundTrip(r *http.Request) (*http.Response, error) {
	h.mu.Lock()
	first := r.Method == http.MethodPost && len(h.posts) == 0 && !h.killed
	kill := h.kill
	if first && kill == killBeforeSend {
		h.die()
		h.mu.Unlock()
		h.wait(r.Context().Done(), "the dying process to cancel the send") // gone before a byte leaves
		return nil, errors.New("process died " + killBeforeSend)
	}
	h.mu.Unlock()
	resp, err := http.DefaultTransport.RoundTrip(r)
	if first && kill == killBeforeIdem && err == nil {
		resp.Body.Close()
		h.mu.Lock()
		h.die()
		h.mu.Unlock()
		h.wait(r.Context().Done(), "the dying process to cancel the call")
		return nil, errors.New("process died " + killBeforeIdem)
	}
	return resp, err
}

// wait waits for ch, failing the test rather than hanging it after 20 s.
func (h *harness) wait(ch <-chan struct{}, what string) {
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		h.t.Errorf("gave up waiting for %s", what)
	}
}

func body(o order) []byte {
	return fmt.Appendf(nil, `{"amount":%d,"currency":"EUR","customer":"cus_1","reference":%q}`, o.Amount, o.Reference)
}

// pay is the step's function: the payment through the live process's Payer.
func (h *harness) pay(ctx context.Context, o order) (string, error) {
	h.mu.Lock()
	h.runs++
	first := h.runs == 1
	p := h.payer
	h.mu.Unlock()
	step, _ := p.Step(ctx)
	res, err := p.Do(ctx, http.MethodPost, paymentsPath, body(o), nil)
	if first {
		close(h.returned)
	}
	h.mu.Lock()
	h.steps = append(h.steps, step)
	h.errs = append(h.errs, err)
	if first && h.kill == killBeforeDBOS {
		h.die()
	}
	h.mu.Unlock()
	if first && h.kill != killNone {
		h.wait(ctx.Done(), "the dying process to cancel the step") // nothing it returns is checkpointed
		return "", ctx.Err()
	}
	if err != nil {
		return "", err
	}
	return chargeID(res)
}

func chargeID(res *idem.Result) (string, error) {
	var c struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(res.Body, &c); err != nil {
		return "", err
	}
	return c.ID, nil
}

// payWorkflow pays the order in one step, retried by DBOS for KindRetry only. A step that
// ends on a manual record is asked again, in later steps under its key, after a durable
// sleep, until Resolve has settled it.
func (h *harness) payWorkflow(ctx dbos.Context, o order) (string, error) {
	id, err := dbos.RunAsStep(ctx, func(sc context.Context) (string, error) { return h.pay(sc, o) },
		dbos.WithStepName("pay"), dbos.WithStepMaxRetries(3), dbos.WithStepBaseInterval(time.Millisecond),
		dbos.WithStepRetryPredicate(idemdbos.Retryable))
	var e *idemdbos.Error
	for errors.As(err, &e) && e.Kind == idemdbos.KindManual {
		if _, err := dbos.Sleep(ctx, 20*time.Millisecond); err != nil {
			return "", err
		}
		step := e.Step
		id, err = dbos.RunAsStep(ctx, func(sc context.Context) (string, error) {
			h.mu.Lock()
			p := h.payer
			h.mu.Unlock()
			res, err := p.DoAs(sc, step, http.MethodPost, paymentsPath, body(o), nil)
			h.mu.Lock()
			h.errs = append(h.errs, err)
			h.mu.Unlock()
			if err != nil {
				return "", err
			}
			return chargeID(res)
		}, dbos.WithStepName("pay-again"), dbos.WithStepMaxRetries(0))
	}
	return id, err
}

// run starts a process, runs the workflow for o under id and, when the process is killed,
// starts the next one (which recovers the workflow) and waits for its result there.
func (h *harness) run(id string, o order) (string, error) {
	h.t.Helper()
	id = h.wfID(id)
	h.mu.Lock()
	h.start()
	d := h.dctx
	h.mu.Unlock()
	handle, err := dbos.RunWorkflow(d, h.workflow, o, dbos.WithWorkflowID(id))
	require.NoError(h.t, err)
	if h.kill == killNone {
		return handle.GetResult()
	}
	h.wait(h.dead, "the killed process's shutdown")
	h.mu.Lock()
	h.dctx = nil // shut down by die
	require.NoError(h.t, h.payer.Client().Close())
	h.pool.Close()
	h.start()
	d = h.dctx
	h.mu.Unlock()
	again, err := dbos.RetrieveWorkflow[string](d, id)
	require.NoError(h.t, err)
	return again.GetResult()
}

// wfID makes a workflow id unique to the test (the DBOS schema is shared by the binary's
// tests, and by every run of -count): name and the harness's executor id.
func (h *harness) wfID(name string) string { return name + "-" + h.executor }

func (h *harness) snapshot() ([]post, int, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]post(nil), h.posts...), h.runs, h.starts
}
