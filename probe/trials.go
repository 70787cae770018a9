package probe

import (
	"context"
	"fmt"
	"net/http"

	"github.com/google/uuid"

	"github.com/idemkit/idem/profile"
)

// trial is one payment of the trials: sent under a fresh key and reference (its answer
// read, or cut by the probe), then resent once with the same key and body.
type trial struct {
	key, ref string
	cut      bool   // the first answer was cut after the request was written
	first    answer // the first answer; zero when cut
	resend   answer // the resend's answer, after transient answers and 409s were waited out
	pointer  bool   // the resend is a conflict the detected profile reads as "done", naming the resource
}

// runTrials sends cfg.Trials payments, each resent once with its key. Every LostEvery-th
// one is the lost-response scenario: the probe cuts its own answer (cutPost). The others
// read their answer, which is how the probe meets a 5xx after a charge. The search counts
// every trial's charges afterwards (gradeTrials): a resend that charged again shows there,
// whatever the answers said.
func (p *prober) runTrials(ctx context.Context) {
	cfg := p.s.cfg
	for i := range cfg.Trials {
		if ctx.Err() != nil {
			return
		}
		t := trial{key: uuid.NewString(), ref: "probe-" + uuid.NewString()}
		body := cfg.Body(t.ref)
		if (i+1)%LostEvery == 0 {
			p.payment(CheckLostResponse, t.key, t.ref)
			// Not sent at all (a refused dial) is a trial with its first answer unread.
			t.cut = p.s.cutPost(ctx, t.key, body) != cutNotSent
		} else {
			p.payment(CheckStored5xx, t.key, t.ref)
			t.first = p.s.post(ctx, t.key, body)
			p.answered(t.key, t.ref, t.first)
		}
		t.resend, _ = p.settle(ctx, func() answer { return p.s.post(ctx, t.key, body) },
			func(a answer) bool { return a.err == nil && a.status == http.StatusConflict })
		p.answered(t.key, t.ref, t.resend)
		p.trials = append(p.trials, t)
	}
}

// resendKind names what a trial's resend showed: "replayed" (the first answer again, or a
// replayed 5xx), "2xx" (a 2xx after a 5xx or a cut: completed or executed again, the search
// tells), "pointer" (a 409 naming the resource, as GoCardless answers), "unsettled" (only
// transient answers or 409s), or "other".
func resendKind(t trial) string {
	a := t.resend
	switch {
	case a.err == nil && !t.cut && t.first.err == nil && a.status == t.first.status && string(a.body) == string(t.first.body):
		return "replayed"
	case storedServerError(a):
		return "replayed"
	case a.ok():
		return "2xx"
	case a.err == nil && a.status == http.StatusConflict && t.pointer:
		return "pointer"
	case transient(a) || a.status == http.StatusConflict:
		return "unsettled"
	}
	return "other"
}

// gradeTrials sets the lost-response and stored-5xx rows from the trials and the search's
// counts.
func (p *prober) gradeTrials() {
	if pr, err := profile.ByName(p.dialect.Profile); err == nil && p.dialect.Profile != "" {
		for i, t := range p.trials {
			if r := ruleMatch(pr, t.resend); r != nil && r.Meaning == profile.Done {
				p.trials[i].pointer = true
			}
		}
	}
	var cut, fives []trial
	read := 0
	for _, t := range p.trials {
		switch {
		case t.cut:
			cut = append(cut, t)
		case t.first.err == nil && t.first.status >= 500:
			fives = append(fives, t)
			read++
		case t.first.err == nil:
			read++
		}
	}
	p.gradeScenario(CheckLostResponse, cut, fmt.Sprintf("no trial had its answer cut (%d trials; every %d-th is cut)", len(p.trials), LostEvery),
		"answers cut after the request was written")
	p.gradeScenario(CheckStored5xx, fives, fmt.Sprintf("no 5xx in the %d answers read: the path of a 5xx after a charge went untested "+
		"(an API answering one on %.0f%% of its executions shows one here with probability %.1f%%)",
		read, DesignRate*100, detectionPower(DesignRate, read)*100), "5xx answers")
}

// gradeScenario grades check from its trials: Broken when the search lists a second charge
// for one of them or a resend got an answer a client cannot act on; Honoured when the search
// lists exactly one charge for each whose resend was answered (at most one after a replayed
// 5xx); NotObserved without trials (none evidence), without a search, or when no resend
// settled.
func (p *prober) gradeScenario(check string, ts []trial, none, what string) {
	if len(ts) == 0 {
		p.setN(check, 0, NotObserved, "%s", none)
		return
	}
	tally := map[string]int{}
	settled := 0
	for _, t := range ts {
		k := resendKind(t)
		tally[k]++
		if p.counts != nil && p.counts[t.ref] > 1 {
			p.setN(check, len(ts), Broken, "%d %s; reference %s: the search lists %d charges after the resend (first %s, resend %s): executed again",
				len(ts), what, t.ref, p.counts[t.ref], firstText(t), t.resend)
			return
		}
		if k == "other" {
			p.setN(check, len(ts), Broken, "%d %s; reference %s: the resend got %s, not the key's answer: a client learns nothing of the charge",
				len(ts), what, t.ref, t.resend)
			return
		}
		if k != "unsettled" {
			settled++
		}
	}
	resends := formatTally(tally)
	switch {
	case p.counts == nil:
		p.setN(check, len(ts), NotObserved, "%d %s, resends: %s; no search by reference (%s): a second charge would not show", len(ts), what, resends, p.noSearch)
		return
	case settled == 0:
		p.setN(check, len(ts), NotObserved, "%d %s, no resend settled (%s)", len(ts), what, resends)
		return
	}
	for _, t := range ts {
		if k := resendKind(t); k == "2xx" && p.counts[t.ref] == 0 {
			p.setN(check, len(ts), NotObserved, "%d %s; reference %s answered 2xx on the resend, yet the search lists no charge for it", len(ts), what, t.ref)
			return
		}
	}
	p.setN(check, len(ts), Honoured, "%d %s, resends: %s; the search lists at most one charge per reference", len(ts), what, resends)
}

// firstText is a trial's first answer for evidence.
func firstText(t trial) string {
	if t.cut {
		return "cut"
	}
	return t.first.String()
}

// retention resends a fresh payment's key 90% into the API's advertised retention: a key
// forgotten before the retention ends turns a client's resend into a second charge.
func (p *prober) retention(ctx context.Context) {
	cfg := p.s.cfg
	switch {
	case cfg.Retention == 0:
		p.set(CheckRetention, NotObserved, "the API advertises no retention (probe.Config.Retention, idemctl probe -retention)")
		return
	case cfg.Retention > cfg.RetentionWait:
		p.set(CheckRetention, NotObserved, "the advertised retention %s is longer than the probe may wait (RetentionWait %s)", cfg.Retention, cfg.RetentionWait)
		return
	}
	key, ref := uuid.NewString(), "probe-"+uuid.NewString()
	p.payment(CheckRetention, key, ref)
	body := cfg.Body(ref)
	first, _ := p.settle(ctx, func() answer { return p.s.post(ctx, key, body) }, nil)
	p.answered(key, ref, first)
	if !first.ok() && !storedServerError(first) {
		p.setN(CheckRetention, 1, NotObserved, "the payment got %s: nothing to resend", first)
		return
	}
	at := cfg.Retention * 9 / 10
	if err := cfg.Sleep(ctx, at); err != nil {
		p.setN(CheckRetention, 1, NotObserved, "the wait of %s ended: %v", at, err)
		return
	}
	again, _ := p.settle(ctx, func() answer { return p.s.post(ctx, key, body) },
		func(a answer) bool { return a.err == nil && a.status == http.StatusConflict })
	p.answered(key, ref, again)
	same := again.err == nil && again.status == first.status && string(again.body) == string(first.body)
	switch {
	case same || answerID(again) != "" && answerID(again) == answerID(first):
		p.setN(CheckRetention, 1, Honoured, "resent %s into the advertised %s: HTTP %d, the key's answer", at, cfg.Retention, again.status)
	case transient(again):
		p.setN(CheckRetention, 1, NotObserved, "resent %s into the advertised %s: only transient answers (%s)", at, cfg.Retention, again)
	case again.ok():
		p.setN(CheckRetention, 1, Broken, "resent %s into the advertised %s: HTTP %d%s, another execution (first%s): the key was forgotten early",
			at, cfg.Retention, again.status, idEvidence(again), idEvidence(first))
	default:
		p.setN(CheckRetention, 1, Broken, "resent %s into the advertised %s: %s instead of the key's answer (%s)", at, cfg.Retention, again, first)
	}
}
