package probe

import (
	"fmt"
	"io"
	"strings"
)

// PlannedCharges is one check's share of the payments a run makes.
type PlannedCharges struct {
	Check string `json:"check"` // the check that sends them
	Min   int    `json:"min"`   // payments (fresh keys with a payment body) on an API that honours the contract
	Max   int    `json:"max"`   // payments at most (stored 5xx, bursts without overlap, an API executing reused keys)
	What  string `json:"what"`  // what is sent, in a sentence
}

// Plan is what Run would send to an API, before anything is sent: the real charges each
// check makes.
type Plan struct {
	Target  string           `json:"target"`  // the POST endpoint
	Charges []PlannedCharges `json:"charges"` // per check, in the order of the run
	Min     int              `json:"min"`     // payments in all, at least
	Max     int              `json:"max"`     // payments in all, at most
	Body    string           `json:"body"`    // one payment's body, with the reference "probe-<uuid>"
}

// NewPlan returns the plan of a run with cfg, sending nothing (Sandbox is not needed). It
// returns an error matching ErrInvalidConfig for a configuration Run would refuse.
func NewPlan(cfg Config) (*Plan, error) {
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	retention, retMax := 0, 0
	retWhat := "none: the API advertises no retention (Config.Retention)"
	if c.Retention > 0 && c.Retention <= c.RetentionWait {
		retention, retMax = 1, 1
		retWhat = fmt.Sprintf("1 payment, resent with its key after %s (90%% of the advertised %s)", c.Retention*9/10, c.Retention)
	} else if c.Retention > 0 {
		retWhat = fmt.Sprintf("none: the advertised retention %s is longer than RetentionWait %s", c.Retention, c.RetentionWait)
	}
	p := &Plan{Target: c.BaseURL + c.Path, Body: string(c.Body("probe-<uuid>"))}
	p.Charges = []PlannedCharges{
		{CheckCreate, 1, transientTries, fmt.Sprintf("1 payment; another under a new key after a stored 5xx, %d at most", transientTries)},
		{CheckReplay, 0, 0, "the create request again, same key: no new payment on an API that replays"},
		{CheckKeyReuse, 0, 1, "another body under the create key: a payment only if the API executes it (broken)"},
		{CheckInProgress, 1, c.Rounds, fmt.Sprintf("%d identical requests under one key per burst, 1 payment each, %d bursts at most", c.Concurrency, c.Rounds)},
		{"trials", c.Trials, c.Trials, fmt.Sprintf("%d payments, each resent once with its key (%d with the answer cut: %s); the resends add none on an API that keeps keys",
			c.Trials, c.Trials/LostEvery, CheckLostResponse)},
		{CheckRetention, retention, retMax, retWhat},
	}
	for _, pc := range p.Charges {
		p.Min += pc.Min
		p.Max += pc.Max
	}
	return p, nil
}

// WriteText writes the plan for a terminal: the payments per check and the total.
func (p *Plan) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "dry run: nothing sent. A run would create these payments at %s:\n\n", p.Target)
	fmt.Fprintf(&b, "%-15s %4s %4s  %s\n", "CHECK", "MIN", "MAX", "WHAT")
	for _, c := range p.Charges {
		fmt.Fprintf(&b, "%-15s %4d %4d  %s\n", c.Check, c.Min, c.Max, c.What)
	}
	fmt.Fprintf(&b, "\nreal charges: %d to %d payments, each with the body\n  %s\n", p.Min, p.Max, p.Body)
	_, err := io.WriteString(w, b.String())
	return err
}
