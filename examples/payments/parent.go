package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"

	"github.com/idemkit/idem"
)

// maxExtraChildren bounds the restarts beyond the planned crashes (a child that exits
// non-zero is an error, so this only guards against a bug).
const maxExtraChildren = 3

// crash is one SIGKILL the parent sent.
type crash struct {
	Gen      int `json:"gen"`
	Instance int `json:"instance"` // the fleet instance the child belonged to (0 without -instances)
	PID      int `json:"pid"`
	Done     int `json:"done"`     // payments final when the signal was sent
	Inflight int `json:"inflight"` // payments the child last reported in flight
}

// tally merges what the children reported. Outcomes are counted once per payment, however
// many processes report them: the keystore is the truth, this is only for progress,
// latencies and client counters.
type tally struct {
	mu        sync.Mutex
	outcome   map[int]bool            // payment index -> succeeded, once final
	ids       map[int]map[string]bool // payment ids the API returned, per payment
	latencies []float64               // ms, one per Do that did network work
	stats     map[int]idem.Stats      // latest snapshot per child
	recovered int                     // records Recover brought to a final state
	pending   int                     // pending records the restarted children found
	crashes   []crash
	children  int
	n         int // payments in the run

	cur map[int]*childState // the children, by generation
}

// childState is what the parent knows of one running child.
type childState struct {
	sending  bool // past Recover
	newDone  int  // payments it brought to a final state
	inflight int
}

func newTally(n int) *tally {
	return &tally{n: n, outcome: map[int]bool{}, ids: map[int]map[string]bool{}, stats: map[int]idem.Stats{},
		cur: map[int]*childState{}}
}

// child returns the state of child gen, created on first use. t.mu is held.
func (t *tally) child(gen int) *childState {
	c := t.cur[gen]
	if c == nil {
		c = &childState{}
		t.cur[gen] = c
	}
	return c
}

// apply merges one event from child gen.
func (t *tally) apply(gen int, ev event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ev.Stats != nil { // cumulative, and in the order the child took them
		t.stats[gen] = *ev.Stats
	}
	switch ev.T {
	case "recover":
		if ev.Report != nil {
			t.pending += ev.Report.Pending
		}
		t.recovered += ev.Recovered
	case "sending":
		t.child(gen).sending = true
	case "call":
		t.latencies = append(t.latencies, ev.MS)
	case "done":
		t.child(gen).inflight = ev.Inflight
		if ev.ID != "" {
			if t.ids[ev.I] == nil {
				t.ids[ev.I] = map[string]bool{}
			}
			t.ids[ev.I][ev.ID] = true
		}
		if _, seen := t.outcome[ev.I]; !seen && !ev.Pending {
			t.outcome[ev.I] = ev.OK
			t.child(gen).newDone++
		}
	}
}

// counts returns done, succeeded and failed payments and the crashes so far.
func (t *tally) counts() (done, ok, failed, crashes int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, succeeded := range t.outcome {
		if succeeded {
			ok++
		} else {
			failed++
		}
	}
	return len(t.outcome), ok, failed, len(t.crashes)
}

// killPoints picks, from the seed, how many payments must be final before each SIGKILL:
// one random point in each of evenly spaced segments of [concurrency, n-2*concurrency], so
// that every kill lands mid-run with a full batch of calls in flight.
func killPoints(n, crashes, concurrency int, seed int64) []int {
	rng := rand.New(rand.NewPCG(uint64(seed), 0xdead))
	lo, hi := concurrency, n-2*concurrency
	if hi-lo < crashes {
		lo, hi = 0, max(n-1, 0)
	}
	seg := float64(hi-lo) / float64(max(crashes, 1))
	points := make([]int, crashes)
	for k := range points {
		points[k] = lo + int(seg*(float64(k)+0.15+0.7*rng.Float64()))
	}
	return points
}

// runChildren runs sender children until one finishes, SIGKILLing the first len(points)
// of them when the payments done reach their point.
func runChildren(ctx context.Context, cfg childConfig, points []int, t *tally, prog *progress) error {
	var gens atomic.Int64
	return runSlot(ctx, cfg, points, false, func() int { return int(gens.Add(1) - 1) }, t, prog)
}

// runSlot runs the sender children of one fleet instance, one after the other: each of the
// first len(points) is SIGKILLed when the payments done reach its point and restarted,
// unless forGood: then the instance stays dead after its first kill. nextGen numbers the
// children across instances.
func runSlot(ctx context.Context, cfg childConfig, points []int, forGood bool, nextGen func() int, t *tally, prog *progress) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the program to re-run as a child: %w", err)
	}
	for k := 0; k < len(points)+1+maxExtraChildren; k++ {
		killAt := -1
		if k < len(points) {
			killAt = points[k]
		}
		cfg.Gen = nextGen()
		killed, err := runChild(ctx, exe, cfg, killAt, t, prog)
		if err != nil || !killed {
			return err
		}
		if forGood {
			prog.println(fmt.Sprintf("instance %d stays dead: the others must reclaim its orphans", cfg.Instance))
			return nil
		}
	}
	return fmt.Errorf("children kept dying after %d starts", len(points)+1+maxExtraChildren)
}

// runFleet runs cfg.Instances sender instances at once on the shared keystore. Each but the
// last is SIGKILLed crashes times at random moments and restarted; the last is killed once
// and never restarted.
func runFleet(ctx context.Context, cfg childConfig, crashes int, t *tally, prog *progress) error {
	var gens atomic.Int64
	nextGen := func() int { return int(gens.Add(1) - 1) }
	errs := make([]error, cfg.Instances)
	var wg sync.WaitGroup
	for i := range cfg.Instances {
		c := cfg
		c.Instance = i
		last := i == cfg.Instances-1
		points := killPoints(cfg.N, crashes, cfg.Concurrency, cfg.Seed+int64(i)*7919)
		if last {
			points = killPoints(cfg.N, 1, cfg.Concurrency, cfg.Seed+int64(i)*7919)
		}
		wg.Go(func() { errs[i] = runSlot(ctx, c, points, last, nextGen, t, prog) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// runChild starts one child, reads its events until its stdout closes, and SIGKILLs it once
// killAt payments are final and it has finished at least one itself (so it is mid-run).
func runChild(ctx context.Context, exe string, cfg childConfig, killAt int, t *tally, prog *progress) (killed bool, err error) {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return false, err
	}
	cmd := exec.CommandContext(ctx, exe) // ctx ends only on the parent's watchdog
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	cmd.Stderr = prog.writer()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return false, err
	}
	t.mu.Lock()
	t.cur[cfg.Gen] = &childState{}
	t.children++
	t.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return false, fmt.Errorf("starting child %d: %w", cfg.Gen, err)
	}

	// Read to EOF even after the kill: lines written before death are real outcomes.
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var ev event
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue // a line cut short by SIGKILL
		}
		t.apply(cfg.Gen, ev)
		if ev.T == "recover" && cfg.Gen > 0 && ev.Report != nil {
			r := ev.Report
			next := "the search by reference settles it"
			switch {
			case !cfg.API.idem():
				next = "the " + cfg.API.Dialect + " profile's routes settle it, or a person"
			case cfg.API.LookupPath == "":
				next = "no -lookup: left for a person"
			}
			msg := fmt.Sprintf("child %d: Recover found %d pending records: %d succeeded, %d failed, %d manual (a stored 5xx: %s), %d still unknown",
				cfg.Gen, r.Pending, r.Succeeded, r.Failed, r.Manual, next, r.Unknown)
			if r.Skipped > 0 {
				msg += fmt.Sprintf(", %d held by a live lease (another sender's, or a dead one's until it expires)", r.Skipped)
			}
			prog.println(msg)
		}
		if killAt >= 0 && !killed {
			if c, num, ok := t.killDue(cfg.Gen, cfg.Instance, cmd.Process.Pid, killAt); ok {
				_ = cmd.Process.Kill() // SIGKILL: no defer, no flush, no goodbye
				killed = true
				prog.println(fmt.Sprintf("crash %d: SIGKILL child %d (pid %d) at %d/%d payments done, %d others under way",
					num, cfg.Gen, c.PID, c.Done, cfg.N, c.Inflight))
			}
		}
	}
	werr := cmd.Wait()
	if killed && werr == nil {
		// It exited 0 before the signal landed: it had finished its work, nothing crashed.
		t.uncrash()
		prog.println(fmt.Sprintf("child %d finished before the SIGKILL landed: not counted as a crash", cfg.Gen))
		killed = false
	}
	switch {
	case killed:
		return true, nil
	case ctx.Err() != nil:
		return false, fmt.Errorf("child %d: %w", cfg.Gen, ctx.Err())
	case werr != nil:
		return false, fmt.Errorf("child %d: %w", cfg.Gen, werr)
	}
	return false, nil
}

// killDue reports whether the current child must die now, and records the crash (num
// counts from 1).
func (t *tally) killDue(gen, instance, pid, killAt int) (c crash, num int, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cs := t.child(gen)
	if !cs.sending || cs.newDone == 0 || len(t.outcome) < killAt || len(t.outcome) >= t.n {
		return crash{}, 0, false
	}
	c = crash{Gen: gen, Instance: instance, PID: pid, Done: len(t.outcome), Inflight: cs.inflight}
	t.crashes = append(t.crashes, c)
	return c, len(t.crashes), true
}

// uncrash forgets the last crash recorded: its child had already exited on its own.
func (t *tally) uncrash() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.crashes = t.crashes[:len(t.crashes)-1]
}

// crashShortfall explains, in one line, why fewer crashes than requested happened ("" if
// none are missing). A kill needs a sender mid-run: one that has finished a payment itself
// and still has payments that are not final. The last sender ran out of such work.
func (t *tally) crashShortfall(requested int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	got := len(t.crashes)
	if got >= requested {
		return ""
	}
	why := fmt.Sprintf("all %d payments were already final, so no work was left to interrupt", t.n)
	if len(t.outcome) < t.n {
		why = fmt.Sprintf("the last sender ran out of work with %d of %d payments final (the rest gave up, still pending), so no work was left to interrupt", len(t.outcome), t.n)
	}
	return fmt.Sprintf("only %d of %d requested crashes happened: %s", got, requested, why)
}
