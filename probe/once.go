package probe

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// addID remembers the "id" member of a 2xx answer for ref.
func (p *prober) addID(ref string, a answer) {
	if id := answerID(a); id != "" {
		p.ids[ref] = append(p.ids[ref], id)
	}
}

// answerID is the "id" string member of a 2xx JSON answer, "" when none.
func answerID(a answer) string {
	if !a.ok() {
		return ""
	}
	var v struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(a.body, &v) != nil {
		return ""
	}
	return v.ID
}

func idEvidence(a answer) string {
	if id := answerID(a); id != "" {
		return ", id " + id
	}
	return ""
}

// count asks the search by reference for every reference the probe sent a payment with.
// It leaves p.counts nil, and p.noSearch saying why, when the API has no usable search.
func (p *prober) count(ctx context.Context) {
	if p.s.cfg.SearchPath == "-" {
		p.noSearch = "none configured"
		return
	}
	if len(p.refs) == 0 {
		p.noSearch = "no payment sent"
		return
	}
	if lag := p.s.cfg.SearchLag; lag > 0 {
		if err := p.s.cfg.Sleep(ctx, lag); err != nil {
			p.noSearch = fmt.Sprintf("the wait of %s for the search's lag ended: %v", lag, err)
			return
		}
	}
	counts := map[string]int{}
	for _, ref := range p.refs {
		path := p.s.searchPath(ref)
		a := p.s.get(ctx, path)
		if a.err != nil || a.status != http.StatusOK {
			p.noSearch = fmt.Sprintf("search %s: %s", strings.SplitN(path, "?", 2)[0], a)
			return
		}
		var v struct {
			Data []json.RawMessage `json:"data"`
		}
		if json.Unmarshal(a.body, &v) != nil || v.Data == nil {
			p.noSearch = "the search answered without a data list"
			return
		}
		counts[ref] = len(v.Data)
	}
	p.counts = counts
	// The trials count towards the power only once the search is seen listing a charge: a
	// search that lists nothing would not list a second charge either. executesOnce also
	// withdraws them when it misses a payment answered 2xx.
	listed := false
	for _, n := range counts {
		listed = listed || n > 0
	}
	for _, t := range p.trials {
		if _, ok := counts[t.ref]; ok && listed {
			p.counted++
		}
	}
}

// executesOnce judges every reference the probe sent: by the search's counts when the API
// has one; without one, only different ids for one key are evidence (Broken), and one id
// per key proves nothing: a hidden second execution would not show.
func (p *prober) executesOnce() {
	n := len(p.refs)
	if p.counts != nil {
		for _, ref := range p.refs {
			if c := p.counts[ref]; c > 1 {
				p.setN(CheckExecutesOnce, n, Broken, "the search lists %d charges for reference %s (sent for %s): executed again on retry", c, ref, p.scenario[ref])
				return
			}
		}
		for _, ref := range p.refs {
			if p.okRef[ref] && p.counts[ref] == 0 {
				p.counted = 0 // the search misses payments: its counts establish no power
				p.setN(CheckExecutesOnce, n, NotObserved, "the search lists no charge for reference %s after a 2xx: it does not find the probe's payments", ref)
				return
			}
		}
		p.found = true
		p.setN(CheckExecutesOnce, n, Honoured, "the search lists at most one charge for each of %d references, one per 2xx; %s",
			n, Power{Trials: p.counted, Rate: DesignRate, Probability: detectionPower(DesignRate, p.counted)})
		return
	}
	distinct := 0
	for _, ref := range p.refs {
		seen := map[string]bool{}
		for _, id := range p.ids[ref] {
			seen[id] = true
		}
		if len(seen) > 1 {
			p.setN(CheckExecutesOnce, n, Broken, "%d different ids for one key and reference %s (sent for %s): executed again on retry", len(seen), ref, p.scenario[ref])
			return
		}
		distinct += len(seen)
	}
	if distinct == 0 {
		p.setN(CheckExecutesOnce, n, NotObserved, "no search by reference (%s) and no id in the answers", p.noSearch)
		return
	}
	p.setN(CheckExecutesOnce, n, NotObserved, "one id per key in every answer, but no search by reference (%s): a second execution whose answer was not shown would not show", p.noSearch)
}
