package idemriver_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemriver"
	"github.com/idemkit/idem/idemtest"
)

// The worker process of the SIGKILL tests: the test binary run again with these variables.
const (
	envWorkerDSN = "IDEMRIVER_TEST_WORKER_DSN"
	envWorkerAPI = "IDEMRIVER_TEST_WORKER_API"
	holdPath     = "/test/hold" // the worker GETs it after the answer, before the job completes
)

func TestMain(m *testing.M) {
	if dsn := os.Getenv(envWorkerDSN); dsn != "" {
		os.Exit(workerProcess(dsn, os.Getenv(envWorkerAPI)))
	}
	os.Exit(m.Run())
}

// workerProcess works payment jobs until it is killed. It takes no part in River's leader
// election, so that the restarted worker, not this dead one, runs the rescuer.
func workerProcess(dsn, api string) int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	t := &fatalTB{}
	c, _ := idemClient(t, pool, api, "doomed", nil)
	w := &idemriver.Worker{Client: c, OnSuccess: func(ctx context.Context, _ *river.Job[idemriver.PaymentArgs], _ *idem.Result) error {
		resp, err := http.Get(api + holdPath)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}}
	rc := riverClient(t, pool, w, func(cfg *river.Config) { cfg.LeaderElectionDisabled = true })
	if err := rc.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	select {} // until SIGKILL
}

// A worker process is SIGKILLed at each point around the send: before the server executes
// (the request arrived), while it executes (the client already gone), after it executed
// but before the answer reached the worker, and after the answer but before River recorded
// the job completed. A restarted worker, which River's rescuer hands the stuck job, finishes
// it: every order is charged exactly once, and no POST follows another without a status
// check between them.
func TestOutboxWorkerSIGKILL(t *testing.T) {
	t.Parallel()
	needPG(t)
	for _, point := range []string{"before-execution", "during-execution", "after-execution", "after-response"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			killTest(t, point)
		})
	}
}

func killTest(t *testing.T, point string) {
	pool, dsn := schemaDSN(t)
	inner := idemtest.NewHandler(idemtest.Config{})
	t.Cleanup(inner.Close)

	var mu sync.Mutex
	var log []string // "POST" and "STATUS", in arrival order
	var child *os.Process
	killed := make(chan struct{})
	var once sync.Once
	kill := func() {
		once.Do(func() {
			mu.Lock()
			p := child
			mu.Unlock()
			_ = p.Kill() // SIGKILL
			_, _ = p.Wait()
			close(killed)
		})
	}
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == holdPath {
			if point == "after-response" {
				kill()
			}
			return
		}
		mu.Lock()
		first := r.Method == http.MethodPost && !contains(log, "POST")
		if r.Method == http.MethodPost {
			log = append(log, "POST")
		} else {
			log = append(log, "STATUS")
		}
		mu.Unlock()
		if !first {
			inner.ServeHTTP(w, r)
			return
		}
		switch point {
		case "before-execution":
			kill()
		case "during-execution":
			body, _ := io.ReadAll(r.Body)
			kill()
			// The server goes on executing though its client is gone (a handler that does not
			// watch the request's context, as most payment backends' commits do not).
			r = r.WithContext(context.WithoutCancel(r.Context()))
			r.Body = io.NopCloser(bytes.NewReader(body))
			inner.ServeHTTP(httptest.NewRecorder(), r)
		case "after-execution":
			inner.ServeHTTP(httptest.NewRecorder(), r)
			kill()
		default:
			inner.ServeHTTP(w, r)
			return
		}
		panic(http.ErrAbortHandler) // no answer: the connection is closed
	}))

	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	args := payment(t, "order-"+point, 2100)
	id := placeOrder(t, pool, inserter, args, 2100, true)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envWorkerDSN+"="+dsn, envWorkerAPI+"="+srv.URL)
	cmd.Stderr = os.Stderr
	mu.Lock() // the handler reads child: set it before the process can send anything
	err = cmd.Start()
	if err == nil {
		child = cmd.Process
	}
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Kill() })
	select {
	case <-killed:
	case <-time.After(15 * time.Second):
		t.Fatal("the worker process never reached the kill point")
	}
	if row := jobRow(t, inserter, id); row.State != "running" {
		t.Fatalf("after the kill the job is %s, want running (stuck with its dead worker)", row.State)
	}

	// The restarted worker: River's rescuer hands it the stuck job once the job has run
	// longer than its timeout (1 s here), and its first pass runs when it becomes leader.
	c, _ := idemClient(t, pool, srv.URL, "restarted", nil)
	rc := riverClient(t, pool, &idemriver.Worker{Client: c, JobTimeout: time.Second, PendingWait: 50 * time.Millisecond}, func(cfg *river.Config) {
		cfg.JobTimeout, cfg.RescueStuckJobsAfter = time.Second, time.Second
	})
	events, stop := rc.Subscribe(finished...)
	defer stop()
	row := jobRow(t, inserter, id)
	time.Sleep(time.Until(row.AttemptedAt.Add(1100 * time.Millisecond))) // River's rescue horizon, in real time
	start(t, rc)
	if ev := waitEvent(t, events, id, finished...); ev.Kind != river.EventKindJobCompleted {
		t.Fatalf("job ended %s, want completed", ev.Kind)
	}

	if n := inner.ExecutionsByReference(args.Reference); n != 1 {
		t.Errorf("charges for %s: %d, want exactly 1", args.Reference, n)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(log); i++ {
		if log[i] == "POST" && !contains(log[:i], "STATUS") {
			t.Errorf("a resend without a status check: %v", log)
		}
	}
	want := map[string]string{ // what the API saw, in order
		"before-execution": "POST STATUS POST",
		"during-execution": "POST STATUS",
		"after-execution":  "POST STATUS",
		"after-response":   "POST",
	}[point]
	if got := strings.Join(log, " "); got != want {
		t.Errorf("requests %q, want %q", got, want)
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// fatalTB lets the worker process reuse the tests' constructors: a failure ends it.
type fatalTB struct{ testing.TB }

func (*fatalTB) Helper()                   {}
func (*fatalTB) Cleanup(func())            {}
func (*fatalTB) Fatal(args ...any)         { fmt.Fprintln(os.Stderr, args...); os.Exit(2) }
func (*fatalTB) Skip(args ...any)          { fmt.Fprintln(os.Stderr, args...); os.Exit(2) }
func (*fatalTB) Fatalf(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...); os.Exit(2) }
