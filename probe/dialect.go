package probe

import (
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/idemkit/idem/profile"
)

// Dialect is the dialect of docs/DIALECTS.md (one of profile.All) that the API's answers
// fit best.
type Dialect struct {
	// Profile is the name of the best-fitting profile (profile.ByName), "" when none fits
	// (no profile carries the key in the probe's header, or no answer matched anything).
	Profile string `json:"profile"`
	// Score is the best profile's score: the sum of the weights of the evidence that fits it,
	// less what contradicts it.
	Score int `json:"score"`
	// Evidence says what fitted the best profile.
	Evidence []string `json:"evidence,omitempty"`
	// Tied names the other profiles with the same score, if any: the answers do not tell
	// them apart.
	Tied []string `json:"tied,omitempty"`
}

// String is the dialect in one sentence.
func (d Dialect) String() string {
	if d.Profile == "" {
		return "no profile of docs/DIALECTS.md fits the answers"
	}
	s := fmt.Sprintf("%s (score %d: %s)", d.Profile, d.Score, strings.Join(d.Evidence, "; "))
	if len(d.Tied) > 0 {
		s += fmt.Sprintf("; tied with %s", strings.Join(d.Tied, ", "))
	}
	return s
}

// Weights of the evidence for a dialect.
const (
	wSpecificRule = 3 // an answer matched a rule with a body or header condition
	wStatusRule   = 1 // an answer matched a rule on its status alone
	wReplay       = 2 // the replay model fits
	wReplayWrong  = 3 // the replay model contradicts
	wStatusRoute  = 3 // the status endpoint in idem's convention answered
	wNoStatus     = 2 // the profile has a status endpoint the API did not answer
	wRetention    = 1 // the advertised retention is the profile's
)

// replayModel names what a repeat of a completed key returned, as a profile.Replay, and
// whether the probe saw one.
func (p *prober) replayModel() (profile.Replay, string, bool) {
	a, first := p.replayed, p.first
	switch {
	case !first.ok() || a.err != nil || a.status == 0:
		return 0, "", false
	case a.status == first.status && string(a.body) == string(first.body):
		return profile.ReplayStored, "a repeat replays the stored answer", true
	case a.ok() && answerID(a) != "" && answerID(a) == answerID(first):
		return profile.ReplayCurrent, "a repeat returns the resource as it is now", true
	case a.status == http.StatusConflict && answerID(first) != "" && strings.Contains(string(a.body), answerID(first)):
		return profile.ReplayPointer, "a repeat is a conflict naming the resource", true
	}
	return 0, "", false
}

// fiveModel names what a resend after a 5xx showed in the trials: the stored 5xx replayed,
// the charge completed by the resend, or a second execution (nothing stored on error).
func (p *prober) fiveModel() (profile.Replay, string, bool) {
	completed, replayed := false, false
	for _, t := range p.trials {
		if t.cut || t.first.err != nil || t.first.status < 500 {
			continue
		}
		if p.counts != nil && p.counts[t.ref] > 1 {
			return profile.ReplayNothingOnError, "a resend after a 5xx executes again", true
		}
		switch resendKind(t) {
		case "replayed":
			replayed = true
		case "2xx":
			completed = completed || p.counts != nil && p.counts[t.ref] == 1
		}
	}
	// A replayed 5xx says the API stores them; a 2xx after a 5xx is then a 5xx of the wire
	// whose stored answer was the 2xx, not a completion.
	switch {
	case replayed:
		return profile.ReplayStored, "a resend after a 5xx replays it", true
	case completed:
		return profile.ReplayCurrent, "a resend after a 5xx completes the charge", true
	}
	return 0, "", false
}

// ruleMatch is the first rule of pr matching a, nil when none.
func ruleMatch(pr profile.Profile, a answer) *profile.Rule {
	if a.err != nil || a.status == 0 {
		return nil
	}
	for i, r := range pr.Rules {
		if r.Matches(a.status, a.header, a.body) {
			return &pr.Rules[i]
		}
	}
	return nil
}

// detect scores every profile of profile.All against what the probe saw: the key header,
// the answers to a reused key, to a concurrent request and to a repeat (matched against the
// profile's rules), the replay model, what a resend after a 5xx did, the status endpoint and
// the advertised retention. Profiles whose key travels elsewhere are not candidates.
func (p *prober) detect() {
	cfg := p.s.cfg
	replay, replayWhy, replaySeen := p.replayModel()
	five, fiveWhy, fiveSeen := p.fiveModel()
	statusOK := p.rows[CheckKeyStatusCompleted].Result == Honoured
	type cand struct {
		name  string
		score int
		why   []string
	}
	var cands []cand
	for _, pr := range profile.All() {
		if pr.KeyField != "" || !strings.EqualFold(pr.KeyHeader, cfg.KeyHeader) {
			continue
		}
		c := cand{name: pr.Name}
		add := func(w int, format string, args ...any) {
			c.score += w
			if w > 0 {
				c.why = append(c.why, fmt.Sprintf(format, args...))
			}
		}
		c.why = append(c.why, "key in "+pr.KeyHeader)
		for _, x := range []struct {
			name string
			a    answer
		}{{"key reuse", p.reused}, {"concurrent request", p.conflict}, {"repeat", p.replayed}} {
			if x.a.ok() {
				continue
			}
			if r := ruleMatch(pr, x.a); r != nil {
				if r.Field != "" || r.Header != "" {
					add(wSpecificRule, "the %s answer (HTTP %d) matches its %s rule", x.name, x.a.status, r.Meaning)
				} else {
					add(wStatusRule, "the %s answer (HTTP %d) matches its %s rule on the status", x.name, x.a.status, r.Meaning)
				}
			}
		}
		if replaySeen {
			// A byte-identical repeat fits a stored answer, and also the resource as it is now
			// when nothing changed it since: no evidence for or against ReplayCurrent.
			switch {
			case pr.Replay == replay || replay == profile.ReplayStored && pr.Replay == profile.ReplayNothingOnError:
				add(wReplay, "%s", replayWhy)
			case replay == profile.ReplayStored && pr.Replay == profile.ReplayCurrent:
			default:
				add(-wReplayWrong, "")
			}
		}
		if fiveSeen {
			if pr.Replay == five {
				add(wReplay, "%s", fiveWhy)
			} else {
				add(-wReplayWrong, "")
			}
		}
		if _, has := pr.Route(profile.KeyStatus); has {
			if statusOK {
				add(wStatusRoute, "the status endpoint by key answers")
			} else {
				add(-wNoStatus, "")
			}
		}
		if cfg.Retention > 0 && pr.Retention == cfg.Retention {
			add(wRetention, "the advertised retention is its %s", pr.Retention)
		}
		cands = append(cands, c)
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].score > cands[j].score })
	if len(cands) == 0 || cands[0].score <= 0 {
		return
	}
	best := cands[0]
	d := Dialect{Profile: best.name, Score: best.score, Evidence: best.why}
	for _, c := range cands[1:] {
		if c.score == best.score {
			d.Tied = append(d.Tied, c.name)
		}
	}
	p.dialect = d
}
