package pgserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// TestCrashExactlyOnce drives payments with an idem client (status endpoint on) through a
// server child on the Postgres backend that SIGKILLs itself at random points of its handler
// (entry, between its business writes, after the commit before the answer) and is SIGKILLed
// by the parent at random moments (anywhere: mid-claim, mid-commit, mid-status), and is
// restarted each time. Every business payment must be executed at most once, every
// acknowledged one exactly once with its outbox row, and no key may stay blocked.
func TestCrashExactlyOnce(t *testing.T) {
	pool := testPool(t, 4)
	n := 1000
	if testing.Short() {
		n = 200
	}
	ctx := context.Background()
	if _, err := pool.Exec(ctx, paymentsSchema); err != nil {
		t.Fatalf("payments schema: %v", err)
	}
	var schema string
	if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	sup := &supervisor{t: t, cfg: childConfig{DSN: os.Getenv("IDEM_TEST_PG_DSN"), Schema: schema, Addr: addr, KillRate: 0.006},
		kills: map[string]int{}, ready: make(chan *exec.Cmd, 1)}
	sup.start()
	defer sup.stop()
	stopShooter := sup.shootRandomly(1, 400*time.Millisecond)

	client, err := idem.NewClient(idem.Config{
		BaseURL:      "http://" + addr,
		KeyStatusURL: "/v1/payments/operations/{key}",
		Credentials: func(r *http.Request) error {
			r.Header.Set("Authorization", "Bearer acct_crash")
			return nil
		},
		Policy: idem.Policy{MaxAttempts: 100, MaxElapsed: 20 * time.Second, AttemptTimeout: 3 * time.Second,
			InitialDelay: 5 * time.Millisecond, MaxDelay: 100 * time.Millisecond, MaxKeyStatusChecks: 20, MaxRetryAfter: 2 * time.Second},
		Budget:     idem.BudgetConfig{Disabled: true},
		HTTPClient: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}},
	})
	if err != nil {
		t.Fatal(err)
	}

	type ack struct {
		ID        int64  `json:"id"`
		Reference string `json:"reference"`
	}
	acks := make([]ack, n)
	keys := make([]string, n)
	var rounds atomic.Int64
	var wg sync.WaitGroup
	next := make(chan int)
	go func() {
		for i := 0; i < n; i++ {
			next <- i
		}
		close(next)
	}()
	for w := 0; w < 16; w++ {
		wg.Go(func() {
			for i := range next {
				ref := fmt.Sprintf("order-%04d", i)
				op := idem.NewOperation(http.MethodPost, "/v1/payments",
					[]byte(fmt.Sprintf(`{"reference":%q,"amount":%d}`, ref, 100+i)), idem.WithIntent(ref),
					idem.WithHeader(http.Header{"Content-Type": {"application/json"}}))
				for r := 0; ; r++ { // an unknown outcome is driven again with the same key
					res, err := client.Do(ctx, op)
					rounds.Add(1)
					if err == nil {
						keys[i] = res.Key
						if res.StatusCode != http.StatusCreated || json.Unmarshal(res.Body, &acks[i]) != nil || acks[i].Reference != ref {
							t.Errorf("%s: answer %d %s", ref, res.StatusCode, res.Body)
						}
						break
					}
					if errors.Is(err, idem.ErrPermanent) || errors.Is(err, idem.ErrKeyConflict) || r == 30 {
						t.Errorf("%s: round %d: %v", ref, r, err)
						break
					}
				}
			}
		})
	}
	wg.Wait()
	stopShooter()
	sup.stop()

	// The ledger: every payment at most once, every acknowledged one exactly once, with the
	// id it was acknowledged with and one outbox row.
	rows, err := pool.Query(ctx, `SELECT p.reference, p.id, p.idem_key, count(o.id) FROM payments p LEFT JOIN outbox o ON o.payment_id = p.id GROUP BY p.id`)
	if err != nil {
		t.Fatal(err)
	}
	type exec struct {
		id  int64
		key string
	}
	executed := map[string][]exec{}
	for rows.Next() {
		var ref, key string
		var id, outbox int64
		if err := rows.Scan(&ref, &id, &key, &outbox); err != nil {
			t.Fatal(err)
		}
		if outbox != 1 {
			t.Errorf("payment %d (%s) has %d outbox rows, want 1", id, ref, outbox)
		}
		executed[ref] = append(executed[ref], exec{id, key})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		ref := fmt.Sprintf("order-%04d", i)
		ex := executed[ref]
		if len(ex) != 1 || keys[i] == "" || ex[0].id != acks[i].ID || ex[0].key != keys[i] {
			t.Errorf("%s: executions %v, acknowledged id %d key %q; want exactly one, the acknowledged", ref, ex, acks[i].ID, keys[i])
		}
	}
	if len(executed) != n {
		t.Errorf("%d references executed, want %d", len(executed), n)
	}
	var processing, completed int
	if err := pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE state = 1), count(*) FILTER (WHERE state = 2) FROM idem_server_keys").
		Scan(&processing, &completed); err != nil {
		t.Fatal(err)
	}
	if processing != 0 || completed != n {
		t.Errorf("keys: %d processing, %d completed; want 0 and %d", processing, completed, n)
	}
	kills, starts, shot := sup.result()
	total := 0
	for _, p := range killPoints {
		total += kills[p]
	}
	t.Logf("%d payments, %d Do rounds, %d server starts, self-kills by point %v, %d SIGKILLs from the parent", n, rounds.Load(), starts, kills, shot)
	if total == 0 || shot == 0 || starts < 2 || starts > total+shot+1 {
		t.Errorf("self-kills %v (total %d), parent kills %d, server starts %d: want both kinds, and at most a start per kill plus the first", kills, total, shot, starts)
	}
	if !testing.Short() {
		for _, p := range killPoints {
			if kills[p] == 0 {
				t.Errorf("no kill at %s: the run did not cover every point", p)
			}
		}
	}
}

// supervisor runs the server child and restarts it whenever it dies, until stop.
type supervisor struct {
	t    *testing.T
	cfg  childConfig
	wg   sync.WaitGroup
	once sync.Once

	mu     sync.Mutex
	done   bool
	cmd    *exec.Cmd
	starts int
	kills  map[string]int
	shot   int // SIGKILLs sent by the parent

	ready chan *exec.Cmd // the newest child that reported ready, for the shooter (room for one)
}

// shootRandomly SIGKILLs each child at a random moment 0..2*mean after it reported ready,
// with a deterministic seed, until the returned stop is called. Timing the shot from the
// child's readiness, not from the last shot, makes every kill land while requests are being
// served (mid-claim, mid-commit, mid-status) rather than during a start-up, which on a slow
// host took longer than the mean interval and left no child ever answering.
func (s *supervisor) shootRandomly(seed uint64, mean time.Duration) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(seed, 0x5407))
		for {
			var cmd *exec.Cmd
			select {
			case <-quit:
				return
			case cmd = <-s.ready:
			}
			select {
			case <-quit:
				return
			case <-time.After(time.Duration(rng.Int64N(int64(2 * mean)))):
			}
			s.mu.Lock()
			if !s.done && s.cmd == cmd && cmd.Process.Signal(syscall.SIGKILL) == nil {
				s.shot++
			}
			s.mu.Unlock()
		}
	})
	return func() { close(quit); wg.Wait() }
}

func (s *supervisor) start() {
	s.wg.Go(func() {
		for gen := uint64(1); ; gen++ {
			s.mu.Lock()
			if s.done {
				s.mu.Unlock()
				return
			}
			cfg := s.cfg
			cfg.Seed = gen
			raw, _ := json.Marshal(cfg)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
			stderr, err := cmd.StderrPipe()
			if err == nil {
				err = cmd.Start()
			}
			if err != nil {
				s.mu.Unlock()
				s.t.Errorf("start child: %v", err)
				return
			}
			s.cmd = cmd
			s.starts++
			s.mu.Unlock()
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				if sc.Text() == readyLine {
					select { // the newest child replaces one the shooter has not taken yet
					case <-s.ready:
					default:
					}
					s.ready <- cmd // room for one, and this goroutine is the only sender
					continue
				}
				if p, ok := strings.CutPrefix(sc.Text(), "kill "); ok {
					s.mu.Lock()
					s.kills[p]++
					s.mu.Unlock()
				} else {
					s.t.Logf("child %d: %s", gen, sc.Text())
				}
			}
			_ = cmd.Wait()
			s.mu.Lock()
			s.cmd = nil // exited: nothing for the shooter to kill until the next start
			s.mu.Unlock()
		}
	})
}

func (s *supervisor) stop() {
	s.once.Do(func() {
		s.mu.Lock()
		s.done = true
		if s.cmd != nil && s.cmd.Process != nil {
			_ = s.cmd.Process.Kill()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
}

func (s *supervisor) result() (map[string]int, int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kills, s.starts, s.shot
}
