package probe_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem/probe"
)

// Deliberately broken servers, each with several seeds: none is ever graded safe; the
// verdict and the rows named agree with the fake's own ledger (a reference charged twice is
// always unsafe).
func TestBrokenServersAreNeverSafe(t *testing.T) {
	const hold = 150 * time.Millisecond
	tests := []struct {
		name    string
		api     func(seed int64) *fake
		verdict probe.Verdict // "" means unsafe or not proven, as the seed falls
		broken  []string      // rows that must be broken
		notSafe []string      // rows that must not be honoured
		random  bool          // the server draws its faults from the seed: run several seeds
	}{
		{"no idempotency", func(int64) *fake { return &fake{noIdempotency: true} },
			probe.VerdictUnsafe, []string{probe.CheckReplay, probe.CheckKeyReuse, probe.CheckLostResponse, probe.CheckExecutesOnce}, nil, false},
		{"no per-key lock", func(int64) *fake { return &fake{noLock: true, hold: hold} },
			probe.VerdictUnsafe, []string{probe.CheckInProgress, probe.CheckExecutesOnce}, nil, false},
		{"5xx not stored at 10%", func(s int64) *fake { return &fake{unstored5xx: 0.1, hold: hold, seed: s} }, "", nil, nil, true},
		{"5xx not stored at 20%", func(s int64) *fake { return &fake{unstored5xx: 0.2, hold: hold, seed: s} }, "", nil, nil, true},
		{"5xx not stored at 30%", func(s int64) *fake { return &fake{unstored5xx: 0.3, hold: hold, seed: s} },
			probe.VerdictUnsafe, []string{probe.CheckExecutesOnce}, nil, true},
		{"key reuse replayed", func(int64) *fake { return &fake{reuseReplay: true, hold: hold} },
			probe.VerdictUnsafe, []string{probe.CheckKeyReuse}, nil, false},
		{"no search", func(s int64) *fake { return &fake{noSearch: true, stored5xx: 0.2, hold: hold, seed: s} },
			probe.VerdictNotProven, nil, []string{probe.CheckExecutesOnce, probe.CheckLostResponse, probe.CheckStored5xx}, true},
		{"no search, charges on every repeat", func(int64) *fake { return &fake{noSearch: true, hiddenCharge: true, hold: hold} },
			probe.VerdictNotProven, nil, []string{probe.CheckExecutesOnce, probe.CheckLostResponse}, false},
		{"replays but charges on every repeat", func(int64) *fake { return &fake{hiddenCharge: true, hold: hold} },
			probe.VerdictUnsafe, []string{probe.CheckLostResponse, probe.CheckExecutesOnce}, nil, false},
		{"422 for an identical resend", func(int64) *fake { return &fake{reuse422: true} },
			probe.VerdictUnsafe, []string{probe.CheckReplay, probe.CheckLostResponse}, nil, false},
	}
	for _, tt := range tests {
		seeds := []int64{1}
		if tt.random {
			seeds = []int64{1, 2, 3}
		}
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed %d", tt.name, seed), func(t *testing.T) {
				t.Parallel()
				f := tt.api(seed)
				rep := run(t, f.start(t).URL, nil)
				if rep.Verdict == probe.VerdictSafe || rep.Suggestion.Safe {
					t.Fatalf("graded safe:\n%s", text(rep))
				}
				if tt.verdict != "" && rep.Verdict != tt.verdict {
					t.Errorf("verdict %s, want %s\n%s", rep.Verdict, tt.verdict, text(rep))
				}
				if f.maxPerReference() > 1 && f.noSearch == false && rep.Verdict != probe.VerdictUnsafe {
					t.Errorf("the ledger charged a reference %d times, verdict %s", f.maxPerReference(), rep.Verdict)
				}
				for _, c := range tt.broken {
					if r, _ := rep.Row(c); r.Result != probe.Broken {
						t.Errorf("%s = %s (%s), want broken", c, r.Result, r.Evidence)
					}
				}
				for _, c := range tt.notSafe {
					if r, _ := rep.Row(c); r.Result == probe.Honoured {
						t.Errorf("%s honoured (%s)", c, r.Evidence)
					}
				}
				if !f.noSearch && rep.Charges.Found != f.total() {
					t.Errorf("charges found %d, ledger %d", rep.Charges.Found, f.total())
				}
			})
		}
	}
}

// The fake honouring the contract, with stored 5xx on 20% of its executions, is graded safe.
func TestCorrectFakeIsSafe(t *testing.T) {
	for _, seed := range []int64{1, 2} {
		f := &fake{stored5xx: 0.2, hold: 150 * time.Millisecond, seed: seed}
		rep := run(t, f.start(t).URL, nil)
		if rep.Verdict != probe.VerdictSafe {
			t.Errorf("seed %d: verdict %s\n%s", seed, rep.Verdict, text(rep))
		}
		if f.maxPerReference() != 1 || rep.Charges.Found != f.total() {
			t.Errorf("seed %d: ledger max %d, charges %+v vs %d", seed, f.maxPerReference(), rep.Charges, f.total())
		}
	}
}
