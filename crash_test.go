package idem

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

const (
	crashChildEnv  = "IDEM_CRASH_CHILD" // set in the child: "url|store path|intents"
	crashKillsEnv  = "IDEM_CRASH_KILLS" // more kills than the default
	crashIntents   = 200                // payments per test run
	crashAuth      = "Bearer sk_crash"  // tenant credential, re-applied after each restart
	crashRefPrefix = "crash-"           // payment reference and intent of intent i
)

// crashChild is the child process: it reopens the keystore, reconciles what a killed
// predecessor left, then sends every intent not finished yet, printing "ok i" or "fail i"
// once an intent has a final answer.
func crashChild() int {
	parts := strings.Split(os.Getenv(crashChildEnv), "|")
	n, _ := strconv.Atoi(parts[2])
	store, err := boltstore.Open(parts[1], &boltstore.Options{Timeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: open store:", err)
		return 3
	}
	defer store.Close()
	c, err := NewClient(Config{BaseURL: parts[0], Store: store, KeyStatusURL: statusPath,
		Credentials: func(r *http.Request) error { r.Header.Set("Authorization", crashAuth); return nil },
		Policy: Policy{AttemptTimeout: 150 * time.Millisecond, InitialDelay: time.Millisecond,
			MaxDelay: 5 * time.Millisecond, MaxAttempts: 20, MaxKeyStatusChecks: 20},
		Budget: BudgetConfig{Disabled: true}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 3
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	report := func(i int, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			fmt.Fprintf(out, "ok %d\n", i)
		} else if errors.Is(err, ErrPermanent) {
			fmt.Fprintf(out, "fail %d\n", i)
		} else {
			fmt.Fprintf(os.Stderr, "child: intent %d: %v\n", i, err)
		}
		out.Flush()
	}
	ctx := context.Background()
	if _, err := c.Recover(ctx, nil); err != nil {
		fmt.Fprintln(os.Stderr, "child: recover:", err)
		return 3
	}
	work := make(chan int)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				ref := crashRefPrefix + strconv.Itoa(i)
				_, err := c.Do(ctx, payment(100+i, ref, WithIntent(ref)))
				report(i, err)
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	return 0
}

// Real processes, real SIGKILLs: a child sends payments through a bbolt keystore to a
// fault-injecting server that lives here, in the parent, and is killed before sending,
// mid-flight and after the server committed. Fresh children reopen the keystore and Recover.
// The ledger must show every intent executed exactly once, and the keystore a final state
// for each.
func TestCrashRecoveryExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	kills := 12
	if v, err := strconv.Atoi(os.Getenv(crashKillsEnv)); err == nil && v > 0 {
		kills = v
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "keys.db")
	rng := rand.New(rand.NewPCG(42, 7))

	var child atomic.Pointer[exec.Cmd]
	var killOnArrival atomic.Int64 // kill the child when this many more payments arrive
	killOnArrival.Store(-1)
	kill := func() {
		if cmd := child.Load(); cmd != nil && cmd.Process != nil {
			_ = cmd.Process.Kill() // SIGKILL: no deferred code, no flush
		}
	}
	srv := idemtest.NewServer(idemtest.Config{
		// Every fault but the stored 500, which fails a payment for good: here each intent
		// must end executed exactly once.
		Faults:    []idemtest.Fault{idemtest.Fault503, idemtest.Fault503Date, idemtest.Fault429, idemtest.FaultResetBeforeProcessing, idemtest.Fault502BeforeProcessing, idemtest.FaultDropAfterCommit, idemtest.FaultSlow, idemtest.Fault500AfterCommit},
		FaultRate: 0.2, Seed: 9, SlowDelay: 40 * time.Millisecond, RetryAfter: -1,
		OnPayment: func(*http.Request) {
			if killOnArrival.Add(-1) == 0 {
				kill() // the request is in the server's hands: it goes on and commits
			}
		},
	})
	defer srv.Close()

	var ackMu sync.Mutex
	acked := map[int]string{} // intent -> "ok" / "fail" as told to the (dead) caller
	run := func(killAfter time.Duration) (killed bool) {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%d", crashChildEnv, srv.URL, path, crashIntents))
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		child.Store(cmd)
		var timer *time.Timer
		if killAfter > 0 {
			timer = time.AfterFunc(killAfter, kill)
		}
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var verdict string
			var i int
			if _, err := fmt.Sscanf(sc.Text(), "%s %d", &verdict, &i); err == nil {
				ackMu.Lock()
				acked[i] = verdict
				ackMu.Unlock()
			}
		}
		err = cmd.Wait()
		if timer != nil {
			timer.Stop()
		}
		child.Store(nil)
		killOnArrival.Store(-1)
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) && exitErr.ProcessState.String() == "signal: killed" {
			return true
		}
		require.NoError(t, err, "child failed")
		return false
	}

	killed := 0
	for k := 0; k < kills; k++ {
		switch k % 3 {
		case 0: // anywhere, often between persist and send, or during Recover
			killed += b2i(run(time.Duration(10+rng.IntN(60)) * time.Millisecond))
		case 1: // mid-flight: the server has the request and will commit it
			killOnArrival.Store(int64(1 + rng.IntN(6)))
			killed += b2i(run(2 * time.Second))
		case 2: // after commit, while the server holds the answer back
			srv.Script(idemtest.FaultSlow)
			killOnArrival.Store(1)
			killed += b2i(run(2 * time.Second))
		}
		ackMu.Lock()
		t.Logf("kill %d (mode %d): %d intents acknowledged, %d executions", k+1, k%3, len(acked), len(srv.Executions()))
		ackMu.Unlock()
	}
	require.GreaterOrEqual(t, killed, kills*3/4, "most children must die mid-run, not after finishing")
	require.False(t, run(0), "the last child runs to the end")

	// The oracle: the server's ledger, and the keystore the children left behind.
	store, err := boltstore.Open(path, nil)
	require.NoError(t, err)
	defer store.Close()
	ctx := context.Background()
	for i := range crashIntents {
		ref := crashRefPrefix + strconv.Itoa(i)
		assert.Equal(t, 1, srv.ExecutionsByReference(ref), "intent %s executed exactly once", ref)
		rec, err := store.GetByIntent(ctx, "", ref)
		if assert.NoError(t, err, "intent %s persisted", ref) {
			assert.Equal(t, keystore.StateSucceeded, rec.State, "intent %s", ref)
			assert.Empty(t, rec.Request.Header.Get("Authorization"))
		}
		assert.Equal(t, "ok", acked[i], "intent %s acknowledged", ref)
	}
	for _, ex := range srv.Executions() {
		assert.Equal(t, crashAuth, ex.Tenant)
	}
	pending, err := store.List(ctx, keystore.StatePending, keystore.StateManual)
	require.NoError(t, err)
	assert.Empty(t, pending)
	t.Logf("%d kills; server: %s", killed, srv.Stats())
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
