package probe_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemkit/idem/probe"
)

// A server that charges, then answers 500 without storing it on 30% of its executions (a
// retry charges again) was graded safe in 4 of 12 seeds: about 4 payments, none of them
// resent after a 5xx. The trials resend every payment and count the charges: never safe.
func TestFindingUnstored500IsNeverSafe(t *testing.T) {
	for seed := int64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			t.Parallel()
			f := &fake{unstored5xx: 0.3, seed: seed}
			rep := run(t, f.start(t).URL, nil)
			if rep.Suggestion.Safe {
				t.Errorf("graded safe; the ledger charged a reference %d times", f.maxPerReference())
			}
			if r, _ := rep.Row(probe.CheckExecutesOnce); r.Result == probe.Honoured && f.maxPerReference() > 1 {
				t.Errorf("executes-once honoured, the ledger charged a reference %d times", f.maxPerReference())
			}
		})
	}
}

// A server without a search that charges again on every repeat of a key was graded
// executes-once honoured, while the evidence said a hidden second execution would not show.
// Without a search the row is not observed, and the API is not called safe.
func TestFindingNoSearchIsNotObserved(t *testing.T) {
	f := &fake{noSearch: true, hiddenCharge: true}
	rep := run(t, f.start(t).URL, nil)
	if r, _ := rep.Row(probe.CheckExecutesOnce); r.Result != probe.NotObserved || !strings.Contains(r.Evidence, "no search") {
		t.Errorf("executes-once = %s (%s), want not observed, naming the missing search", r.Result, r.Evidence)
	}
	if rep.Suggestion.Safe {
		t.Error("graded safe")
	}
	if f.maxPerReference() < 2 {
		t.Errorf("the fake charged no reference twice (max %d): the test proves nothing", f.maxPerReference())
	}
}

// Against an API storing a 500 for every payment, the probe called the answers "only
// transient" and suggested KeyStatusURL (none) next to its own status-not-found honoured
// row. A replayed 5xx is the key's stored answer, not a transient one; the status endpoint
// reports those keys completed with their 500, so it is suggested.
func TestFindingStored500IsNotTransient(t *testing.T) {
	f := &fake{every500: true}
	rep := run(t, f.start(t).URL, nil)
	c, _ := rep.Row(probe.CheckCreate)
	if c.Result == probe.Broken || strings.Contains(c.Evidence, "transient answers") || !strings.Contains(c.Evidence, "stored answer") {
		t.Errorf("create = %s (%s), want a stored 5xx described as such", c.Result, c.Evidence)
	}
	if r, _ := rep.Row(probe.CheckKeyStatusCompleted); r.Result != probe.Honoured || !strings.Contains(r.Evidence, "500") {
		t.Errorf("status-completed = %s (%s), want completed with the stored 500", r.Result, r.Evidence)
	}
	nf, _ := rep.Row(probe.CheckKeyStatusNotFound)
	if nf.Result != probe.Honoured || rep.Suggestion.KeyStatusURL != "/v1/payments/operations/{key}" {
		t.Errorf("status-not-found %s, KeyStatusURL %q", nf.Result, rep.Suggestion.KeyStatusURL)
	}
	if r, _ := rep.Row(probe.CheckStored5xx); r.Result != probe.Honoured {
		t.Errorf("stored-5xx = %s (%s)", r.Result, r.Evidence)
	}
}

// The probe made real charges without saying so. The report counts them (the search's
// count equals the server's ledger), prints them, and a dry run lists them before anything
// is sent.
func TestFindingChargesAreReported(t *testing.T) {
	f := &fake{every500: true}
	srv := f.start(t)
	plan, err := probe.NewPlan(probe.Config{BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if f.total() != 0 {
		t.Fatalf("the plan sent %d payments", f.total())
	}
	rep := run(t, srv.URL, nil)
	if rep.Charges.Found != f.total() || rep.Charges.Keys != f.total() || rep.Charges.Answered2xx != 0 {
		t.Errorf("charges %+v, ledger %d", rep.Charges, f.total())
	}
	if f.total() < plan.Min || f.total() > plan.Max {
		t.Errorf("ledger %d outside the plan's %d..%d", f.total(), plan.Min, plan.Max)
	}
	if out := text(rep); !strings.Contains(out, fmt.Sprintf("real charges: %d payment keys sent", f.total())) ||
		!strings.Contains(out, fmt.Sprintf("the search lists %d charges", f.total())) {
		t.Errorf("the text does not print the charges:\n%s", out)
	}
}
