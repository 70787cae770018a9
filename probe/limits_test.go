package probe_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem/probe"
)

// Concurrency, Rounds and Trials are bounded: at the cap a plan is made and its sums are
// exact; one above (or an absurd value) is ErrInvalidConfig naming the field and the cap,
// before anything is sent or allocated.
func TestConfigCaps(t *testing.T) {
	base := probe.Config{BaseURL: "http://x"}
	at := base
	at.Concurrency, at.Rounds, at.Trials = probe.MaxConcurrency, probe.MaxRounds, probe.MaxTrials
	p, err := probe.NewPlan(at)
	if err != nil {
		t.Fatalf("at the caps: %v", err)
	}
	// create 1..5, replay 0, key reuse 0..1, bursts 1..Rounds, trials, retention 0.
	if wantMin, wantMax := 1+1+probe.MaxTrials, 5+1+probe.MaxRounds+probe.MaxTrials; p.Min != wantMin || p.Max != wantMax {
		t.Errorf("plan %d to %d, want %d to %d", p.Min, p.Max, wantMin, wantMax)
	}
	const huge = int(^uint(0) >> 1)
	for _, tc := range []struct {
		field string
		set   func(*probe.Config, int)
		limit int
	}{
		{"Concurrency", func(c *probe.Config, n int) { c.Concurrency = n }, probe.MaxConcurrency},
		{"Rounds", func(c *probe.Config, n int) { c.Rounds = n }, probe.MaxRounds},
		{"Trials", func(c *probe.Config, n int) { c.Trials = n }, probe.MaxTrials},
	} {
		for _, n := range []int{tc.limit + 1, huge, -1} {
			c := base
			tc.set(&c, n)
			_, err := probe.NewPlan(c)
			if !errors.Is(err, probe.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) ||
				!strings.Contains(err.Error(), strconv.Itoa(tc.limit)) {
				t.Errorf("%s %d: %v, want ErrInvalidConfig naming %s and %d", tc.field, n, err, tc.field, tc.limit)
			}
		}
	}
}

// A search that answers but lists none of the probe's payments establishes no power: the
// report says so, and executes-once is not observed.
func TestEmptySearchEstablishesNoPower(t *testing.T) {
	f := &fake{emptySearch: true}
	rep := run(t, f.start(t).URL, func(c *probe.Config) { c.Trials = 6 })
	if rep.Power.Trials != 0 || rep.Power.Probability != 0 {
		t.Errorf("power %+v, want none", rep.Power)
	}
	if r := row(rep, probe.CheckExecutesOnce); r.Result != probe.NotObserved {
		t.Errorf("executes-once %+v", r)
	}
	out := text(rep)
	if strings.Contains(out, "trials counted by the search") || !strings.Contains(out, "power: not established") {
		t.Errorf("power line:\n%s", out)
	}
	if rep.Verdict == probe.VerdictSafe {
		t.Errorf("verdict %s with no search evidence", rep.Verdict)
	}
}

// A server that marks first answers Idempotent-Replayed: true has a marker that tells
// nothing: the row is broken, and the suggestion says what idem makes of it. The marker
// row is not a safety row: the verdict does not rest on it.
func TestReplayMarkerOnFirstAnswersIsBroken(t *testing.T) {
	f := &fake{markFirst: true}
	rep := run(t, f.start(t).URL, func(c *probe.Config) { c.Trials = 6 })
	r := row(rep, probe.CheckReplayMarker)
	if r.Result != probe.Broken || !strings.Contains(r.Evidence, "first answer to a fresh key") {
		t.Errorf("replay-marker %+v, want broken", r)
	}
	if !strings.Contains(strings.Join(rep.Suggestion.Notes, "\n"), "Idempotent-Replayed: true on first answers") {
		t.Errorf("notes %q", rep.Suggestion.Notes)
	}
	if rep.Verdict == probe.VerdictUnsafe {
		t.Errorf("verdict %s: the marker is not a safety row", rep.Verdict)
	}
	// The same server marking only replays is honoured.
	rep = run(t, (&fake{}).start(t).URL, func(c *probe.Config) { c.Trials = 6 })
	if r := row(rep, probe.CheckReplayMarker); r.Result != probe.Honoured {
		t.Errorf("replay-marker of a correct server %+v", r)
	}
}

func row(rep *probe.Report, check string) probe.Row {
	for _, r := range rep.Rows {
		if r.Check == check {
			return r
		}
	}
	return probe.Row{}
}
