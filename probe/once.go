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

// executesOnce judges the probe's references: by the search by reference when the API has
// one, else by the ids of the answers.
func (p *prober) executesOnce(ctx context.Context, refs ...string) {
	if p.s.cfg.SearchPath != "-" {
		counts, evidence, ok := p.search(ctx, refs)
		if ok {
			for i, ref := range refs {
				switch n := counts[i]; {
				case n > 1:
					p.set(CheckExecutesOnce, Broken, "the search lists %d charges for reference %s: executed again on retry", n, ref)
					return
				case n == 0:
					p.set(CheckExecutesOnce, NotObserved, "the search lists no charge for reference %s after a 2xx: it does not find the probe's payments", ref)
					return
				}
			}
			p.found = true
			p.set(CheckExecutesOnce, Honoured, "the search lists one charge per reference (%d references)", len(refs))
			return
		}
		if evidence != "" {
			defer func() { // keep the reason the search was not used
				r := p.rows[CheckExecutesOnce]
				r.Evidence += "; " + evidence
				p.rows[CheckExecutesOnce] = r
			}()
		}
	}
	distinct := 0
	for _, ref := range refs {
		seen := map[string]bool{}
		for _, id := range p.ids[ref] {
			seen[id] = true
		}
		if len(seen) > 1 {
			p.set(CheckExecutesOnce, Broken, "%d different ids for one key and reference: executed again on retry", len(seen))
			return
		}
		distinct += len(seen)
	}
	if distinct == 0 {
		p.set(CheckExecutesOnce, NotObserved, "no search by reference and no id in the answers")
		return
	}
	p.set(CheckExecutesOnce, Honoured, "one id per key in every answer (no search: a hidden second execution would not show)")
}

// search counts each reference's charges; ok is false when the API has no usable search.
func (p *prober) search(ctx context.Context, refs []string) (counts []int, evidence string, ok bool) {
	for _, ref := range refs {
		path := p.s.searchPath(ref)
		a := p.s.get(ctx, path)
		if a.err != nil || a.status != http.StatusOK {
			return nil, fmt.Sprintf("search %s: %s", strings.SplitN(path, "?", 2)[0], a), false
		}
		var v struct {
			Data []json.RawMessage `json:"data"`
		}
		if json.Unmarshal(a.body, &v) != nil || v.Data == nil {
			return nil, "search answered without a data list", false
		}
		counts = append(counts, len(v.Data))
	}
	return counts, "", true
}
