package probe

import (
	"fmt"
	"math"
)

// Verdict is the probe's overall judgement of an API.
type Verdict string

// The verdicts of a Report.
const (
	// VerdictSafe: every row of SafetyChecks was observed Honoured and no row is Broken.
	VerdictSafe Verdict = "safe"
	// VerdictUnsafe: a row of SafetyChecks, or the retention row, is Broken: a retry can
	// charge twice or fail a payment wrongly.
	VerdictUnsafe Verdict = "unsafe"
	// VerdictNotProven: nothing unsafe was seen, but a row of SafetyChecks was not observed
	// (no search to count charges, no 5xx met, no overlap of concurrent requests): what the
	// probe did not see is not called safe.
	VerdictNotProven Verdict = "not proven"
)

// DesignRate is the rate of re-execution the default number of trials is sized to catch: a
// server that charges again after 10% of its executions (an unstored 5xx, a lost answer
// whose key was not kept) is caught by DefaultTrials with a probability of at least
// DesignPower.
const DesignRate = 0.10

// DesignPower is the probability with which DefaultTrials catch a server re-executing at
// DesignRate: 1-(1-DesignRate)^DefaultTrials = 0.958.
const DesignPower = 0.95

// Power states how likely the probe's trials were to catch an API that charges again after
// a fraction Rate of its executions.
type Power struct {
	// Trials is how many payments were sent, resent with their key, and counted by a search
	// seen to find the probe's payments: the trials the probability rests on. 0 (the power
	// not established) without a usable search, or when it lists no charge at all or none
	// for a payment answered 2xx.
	Trials int `json:"trials"`
	// Rate is the re-execution rate the probability is given for (DesignRate).
	Rate float64 `json:"rate"`
	// Probability is 1-(1-Rate)^Trials: the chance that at least one trial met the fault
	// and the search showed its second charge.
	Probability float64 `json:"probability"`
}

// detectionPower is 1-(1-rate)^n, the probability that n independent trials each meeting a
// fault with probability rate meet it at least once.
func detectionPower(rate float64, n int) float64 {
	if n <= 0 {
		return 0
	}
	return 1 - math.Pow(1-rate, float64(n))
}

// trialsFor is the least n with detectionPower(rate, n) >= power.
func trialsFor(rate, power float64) int {
	return int(math.Ceil(math.Log(1-power) / math.Log(1-rate)))
}

// String is the power in one sentence.
func (p Power) String() string {
	if p.Trials == 0 {
		return "not established: no search was seen to find the probe's payments (none usable, or it listed none of them), so the probe cannot tell how often the API charges twice"
	}
	s := fmt.Sprintf("%d trials counted by the search: an API charging again after %.0f%% of its executions is caught with probability %.1f%%",
		p.Trials, p.Rate*100, p.Probability*100)
	if p.Probability < DesignPower {
		s += fmt.Sprintf(" (below %.0f%%: %d trials reach it)", DesignPower*100, trialsFor(p.Rate, DesignPower))
	}
	return s
}

// Charges counts the real operations the probe made. Every payment key the probe sent may
// have charged, whatever it was answered.
type Charges struct {
	// Keys is how many fresh keys were sent with a payment body: each may be one charge.
	Keys int `json:"keys"`
	// Answered2xx is how many of those keys were answered 2xx: certainly charged.
	Answered2xx int `json:"answered_2xx"`
	// Found is how many charges the search listed for the probe's references, -1 when the
	// API has no usable search (the real number is then unknown, at most Keys on an API that
	// executes each key once).
	Found int `json:"found"`
}

// String is the charges in one sentence.
func (c Charges) String() string {
	s := fmt.Sprintf("%d payment keys sent (each may have charged), %d answered 2xx", c.Keys, c.Answered2xx)
	if c.Found >= 0 {
		return s + fmt.Sprintf("; the search lists %d charges", c.Found)
	}
	return s + "; no search to count the charges"
}
