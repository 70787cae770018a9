package pgserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/pgserver"
	"github.com/jackc/pgx/v5/pgxpool"
)

// childEnv carries the crash test's child configuration (JSON).
const childEnv = "IDEM_PGSERVER_CHILD"

// readyLine is what the child writes to stderr once it serves.
const readyLine = "ready"

// killPoints are the places of a request where the child may SIGKILL itself: inside the
// handler before, between and after its two business writes (the answer not yet committed),
// and after the commit before the client has the answer.
var killPoints = []string{"entry", "after_payment", "after_outbox", "after_commit"}

type childConfig struct {
	DSN      string  `json:"dsn"`
	Schema   string  `json:"schema"`
	Addr     string  `json:"addr"`
	Seed     uint64  `json:"seed"`
	KillRate float64 `json:"kill_rate"` // per kill point
}

// paymentsSchema is the business side of the crash test: no unique constraint on reference,
// so that a second execution of one payment would show as a second row.
const paymentsSchema = `
CREATE TABLE IF NOT EXISTS payments (id bigserial PRIMARY KEY, reference text NOT NULL, idem_key text NOT NULL, amount bigint NOT NULL);
CREATE TABLE IF NOT EXISTS outbox (id bigserial PRIMARY KEY, payment_id bigint NOT NULL, event text NOT NULL);`

// childMain serves the payments API through the middleware on the Postgres backend until it
// is killed (by itself, at a random kill point, or by the parent).
func childMain(raw string) error {
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return err
	}
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return err
	}
	pc.ConnConfig.RuntimeParams["search_path"] = cfg.Schema
	pc.MaxConns = 24
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xc4a5))
	var rngMu = make(chan struct{}, 1)
	maybeKill := func(point string) {
		rngMu <- struct{}{}
		hit := rng.Float64() < cfg.KillRate
		<-rngMu
		if hit {
			fmt.Fprintf(os.Stderr, "kill %s\n", point)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // never answer
		}
	}
	mw, err := idemserver.New(idemserver.Config{
		Backend:   pgserver.New(pool),
		Tenant:    bearerTenant,
		Operation: func(r *http.Request) string { return "POST /v1/payments" },
	})
	if err != nil {
		return err
	}
	pay := func(w http.ResponseWriter, r *http.Request) {
		maybeKill("entry")
		var p struct {
			Reference string `json:"reference"`
			Amount    int64  `json:"amount"`
		}
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.Reference == "" || p.Amount <= 0 {
			_ = idemserver.NotExecuted(r)
			http.Error(w, `{"error":"invalid_payment"}`, http.StatusBadRequest)
			return
		}
		tx, err := pgserver.MustTx(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		scope, _ := idemserver.KeyScope(r)
		var id int64
		if err := tx.QueryRow(r.Context(), "INSERT INTO payments (reference, idem_key, amount) VALUES ($1, $2, $3) RETURNING id",
			p.Reference, scope.Key, p.Amount).Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError) // the aborted transaction is never stored
			return
		}
		maybeKill("after_payment")
		if _, err := tx.Exec(r.Context(), "INSERT INTO outbox (payment_id, event) VALUES ($1, 'payment.created')", id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		maybeKill("after_outbox")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d,"reference":%q,"amount":%d}`, id, p.Reference, p.Amount)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/payments", mw.Handler(http.HandlerFunc(pay)))
	mux.Handle("GET /v1/payments/operations/{key}", mw.KeyStatusHandler("POST /v1/payments", nil))
	afterCommit := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			w = &killWriter{ResponseWriter: w, kill: maybeKill}
		}
		mux.ServeHTTP(w, r)
	})
	// Open the pool's connections before serving: a fresh PostgreSQL backend costs a fork and
	// an authentication, and a child that first opens them under 16 clients' requests may be
	// shot before it answers any (on a slow host, every child was).
	// Four, opened together; each more costs ~12 ms on a slow host, and the rest open on demand.
	warm, errs := make([]*pgxpool.Conn, 4), make([]error, 4)
	var wg sync.WaitGroup
	for i := range warm {
		wg.Go(func() { warm[i], errs[i] = pool.Acquire(ctx) })
	}
	wg.Wait()
	for _, c := range warm {
		if c != nil {
			c.Release()
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var ln net.Listener
	for i := 0; ; i++ { // the killed predecessor's socket may linger for a moment
		if ln, err = net.Listen("tcp", cfg.Addr); err == nil || i == 100 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, readyLine) // the parent's shooter times its shot from here
	srv := &http.Server{Handler: afterCommit, ReadHeaderTimeout: 5 * time.Second}
	err = srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func bearerTenant(r *http.Request) (string, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return "", errors.New("unauthenticated")
	}
	return tok, nil
}

// killWriter may kill the process when the middleware starts writing a 201: its answer is
// committed, the client does not have it.
type killWriter struct {
	http.ResponseWriter
	kill func(string)
}

func (k *killWriter) WriteHeader(code int) {
	if code == http.StatusCreated && k.Header().Get(idemserver.ReplayedHeader) == "" {
		k.kill("after_commit")
	}
	k.ResponseWriter.WriteHeader(code)
}
