package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/google/uuid"
	"github.com/idemkit/idem/outcome"
)

// Run sends the contract's checks to cfg.BaseURL and returns one Row per check (in the
// order of Checks) and the suggested client configuration. It creates real operations:
// without cfg.Sandbox it returns ErrNotSandbox before sending anything. Other errors match
// ErrInvalidConfig (naming the field), ErrUnreachable when no request got an HTTP answer, or
// are ctx's. A transport error before any answer is no evidence against the contract: a row
// whose requests all met one is NotObserved, never Broken.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &prober{s: &sender{cfg: c}, rows: map[string]Row{}, ids: map[string][]string{}, paid: map[string]bool{}, okRef: map[string]bool{}, scenario: map[string]string{}}
	p.run(ctx)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s := p.s; !s.answered {
		return nil, fmt.Errorf("%w: %s: no answer to %d requests (last: %v)", ErrUnreachable, c.BaseURL, s.sent, s.lastErr)
	}
	rep := &Report{Target: c.BaseURL + c.Path, Unauthorized: p.denied, Verdict: verdictOf(p.rows), Dialect: p.dialect}
	for _, check := range Checks {
		rep.Rows = append(rep.Rows, p.rows[check])
	}
	rep.Power = Power{Trials: p.counted, Rate: DesignRate, Probability: detectionPower(DesignRate, p.counted)}
	rep.Charges = Charges{Keys: len(p.refs), Answered2xx: len(p.paid), Found: -1}
	if p.counts != nil {
		rep.Charges.Found = 0
		for _, n := range p.counts {
			rep.Charges.Found += n
		}
	}
	rep.Suggestion = p.suggestion(rep.Verdict)
	return rep, nil
}

// prober holds one run's findings.
type prober struct {
	s      *sender
	rows   map[string]Row
	ids    map[string][]string // "id" members of the 2xx answers, per reference
	codes  []string            // key-reuse codes idem.IsKeyReuse does not recognise
	first  answer              // the create answer
	fresh  bool                // first answered the key's first request (no transient answer before)
	found  bool                // the search by reference found the probe's payments
	denied bool                // an answer refused the probe's credentials (unauthorized)

	refs      []string          // every reference sent with a payment body under a fresh key
	scenario  map[string]string // the check each reference was sent for
	paid      map[string]bool   // keys answered 2xx
	okRef     map[string]bool   // references answered 2xx
	stored    answer            // the last stored 5xx create met (a key that never gave a 2xx)
	storedKey string            // its key
	replayed  answer            // the replay check's answer
	reused    answer            // the key-reuse check's answer
	conflict  answer            // a 409 met by the in-progress bursts
	trials    []trial           // the trials, in order
	counts    map[string]int    // charges per reference by the search; nil without a usable search
	noSearch  string            // why the search was not used, "" when it was
	counted   int               // trials the search counted
	dialect   Dialect           // the dialect detected
}

func (p *prober) set(check string, res Result, format string, args ...any) {
	n := 0
	if res != NotObserved && oneRequest[check] {
		n = 1
	}
	p.rows[check] = Row{Check: check, Rule: rules[check], Result: res, Evidence: fmt.Sprintf(format, args...), Trials: n}
}

// oneRequest are the checks whose verdict rests on one request when they have one.
var oneRequest = map[string]bool{CheckReplay: true, CheckReplayMarker: true, CheckKeyReuse: true,
	CheckKeyStatusCompleted: true, CheckKeyStatusNotFound: true}

// setN is set with the number of trials the row rests on.
func (p *prober) setN(check string, n int, res Result, format string, args ...any) {
	p.set(check, res, format, args...)
	r := p.rows[check]
	r.Trials = n
	p.rows[check] = r
}

// payment records a fresh key and reference about to be sent with a payment body.
func (p *prober) payment(check, key, ref string) {
	p.refs = append(p.refs, ref)
	p.scenario[ref] = check
}

// answered records a's "id" for ref and whether key was answered 2xx.
func (p *prober) answered(key, ref string, a answer) {
	p.addID(ref, a)
	if a.ok() {
		p.paid[key], p.okRef[ref] = true, true
	}
}

func (p *prober) run(ctx context.Context) {
	p.statusNotFound(ctx)
	key1, ref1, ok := p.create(ctx)
	if ok {
		p.replay(ctx, key1, ref1)
		p.keyReuse(ctx, key1, ref1)
		p.inProgress(ctx)
	} else {
		for _, c := range []string{CheckReplay, CheckReplayMarker, CheckKeyReuse, CheckInProgress} {
			p.set(c, NotObserved, "needs a create answered 2xx")
		}
	}
	executes := ok || p.storedKey != ""
	if executes { // the API executes payments: the trials can tell how
		p.runTrials(ctx)
		p.retention(ctx)
	} else {
		for _, c := range []string{CheckLostResponse, CheckStored5xx, CheckRetention} {
			p.set(c, NotObserved, "needs a create that the API executed (a 2xx or a stored 5xx)")
		}
	}
	switch {
	case ok:
		p.statusCompleted(ctx, key1, p.first.status)
	case p.storedKey != "":
		p.statusCompleted(ctx, p.storedKey, p.stored.status)
	default:
		p.set(CheckKeyStatusCompleted, NotObserved, "needs a key the API executed")
	}
	p.retryAfter()
	if executes {
		p.count(ctx)
	} else {
		p.noSearch = "no payment was executed"
	}
	p.detect()
	p.keyReuseByProfile()
	p.gradeTrials()
	p.executesOnce()
}

// create sends one operation under a fresh key until it gets a 2xx, resending the same key
// after a transient answer. A replayed 5xx is that key's stored answer (execution began,
// effect unknown): the probe starts another operation under a new key, at most
// transientTries operations. Any other answer is Broken; only transient ones, NotObserved.
func (p *prober) create(ctx context.Context) (key, ref string, ok bool) {
	cfg := p.s.cfg
	var met []answer
	stored := 0
	for range transientTries {
		key, ref = uuid.NewString(), "probe-"+uuid.NewString()
		p.payment(CheckCreate, key, ref)
		a, t := p.settle(ctx, func() answer { return p.s.post(ctx, key, cfg.Body(ref)) }, nil)
		met = append(met, t...)
		p.first = a
		p.answered(key, ref, a)
		switch {
		case a.ok():
			p.fresh = len(t) == 0
			p.setN(CheckCreate, len(p.refs), Honoured, "HTTP %d%s%s", a.status, idEvidence(a), storedNote(stored, transientNote(met)))
			return key, ref, true
		case storedServerError(a):
			// Not transient: the key's stored answer says execution began and its effect is
			// unknown. Another payment under a new key, at most transientTries of them.
			stored++
			p.stored, p.storedKey = a, key
			continue
		case transient(a):
			p.notObservedTransient(CheckCreate, a, met)
			return "", "", false
		case unauthorized(a):
			p.denied = true
			p.set(CheckCreate, NotObserved, "a fresh key got %s: %s", a, authAdvice)
			return "", "", false
		}
		p.setN(CheckCreate, len(p.refs), Broken, "a fresh key got %s%s", a, transientNote(met))
		return "", "", false
	}
	p.setN(CheckCreate, len(p.refs), NotObserved, "each of %d payments was answered a 5xx that the API then replayed as its key's stored answer "+
		"(%s): execution began, its effect unknown, so no payment completed; not a transient answer (see %s)", stored, p.stored, CheckStored5xx)
	return "", "", false
}

// storedNote prefixes note with the stored 5xx met before a 2xx, if any.
func storedNote(stored int, note string) string {
	if stored == 0 {
		return note
	}
	return fmt.Sprintf(" (after %d payments answered a stored 5xx)%s", stored, note)
}

// replay resends the create request: the same answer, ideally marked as a replay. A 409
// (still in progress) and transient answers are resent, a bounded number of times.
func (p *prober) replay(ctx context.Context, key, ref string) {
	a, met := p.settle(ctx, func() answer { return p.s.post(ctx, key, p.s.cfg.Body(ref)) },
		func(a answer) bool { return a.err == nil && a.status == http.StatusConflict })
	p.answered(key, ref, a)
	p.replayed = a
	note := transientNote(met)
	switch {
	case a.err == nil && a.status == p.first.status && bytes.Equal(a.body, p.first.body):
		p.set(CheckReplay, Honoured, "HTTP %d, byte-identical body%s", a.status, note)
	case a.ok() && answerID(a) != "" && answerID(a) == answerID(p.first):
		p.set(CheckReplay, Honoured, "HTTP %d, the resource as it is now (same id %s), not the stored answer%s", a.status, answerID(a), note)
	case a.err == nil && a.status == http.StatusConflict && answerID(p.first) != "" && bytes.Contains(a.body, []byte(answerID(p.first))):
		p.set(CheckReplay, Honoured, "HTTP 409 naming the resource %s (a pointer, not a replay)%s", answerID(p.first), note)
		p.set(CheckReplayMarker, NotObserved, "no replay")
		return
	case a.ok():
		p.set(CheckReplay, Broken, "HTTP %d with another body%s (first: %s): executed again?", a.status, idEvidence(a), short(p.first.body))
		p.set(CheckReplayMarker, NotObserved, "no replay")
		return
	case transient(a):
		p.notObservedTransient(CheckReplay, a, met)
		p.set(CheckReplayMarker, NotObserved, "no replay")
		return
	default:
		p.set(CheckReplay, Broken, "the resend got %s instead of the first answer%s", a, note)
		p.set(CheckReplayMarker, NotObserved, "no replay")
		return
	}
	switch {
	case p.fresh && replayed(p.first):
		// The key's first request can have nothing to replay: a marker there says nothing,
		// and makes idem read a first 5xx as a stored one.
		p.set(CheckReplayMarker, Broken, "the first answer to a fresh key (HTTP %d) also carries %s: true: the marker does not tell a replay from a first answer",
			p.first.status, ReplayedHeader)
	case replayed(a):
		p.set(CheckReplayMarker, Honoured, "%s: true", ReplayedHeader)
	default:
		p.set(CheckReplayMarker, NotObserved, "no %s header on the replay", ReplayedHeader)
	}
}

// retryAfter grades every Retry-After the probe met.
func (p *prober) retryAfter() {
	p.s.mu.Lock()
	seen, bare := p.s.retryAfters, p.s.unthrottled
	p.s.mu.Unlock()
	if len(seen) == 0 {
		if len(bare) > 0 {
			p.set(CheckRetryAfter, NotObserved, "%d answers %v without Retry-After (a client falls back on backoff)", len(bare), bare)
			return
		}
		p.set(CheckRetryAfter, NotObserved, "no answer carried Retry-After (the API did not throttle the probe)")
		return
	}
	forms := map[string]bool{}
	for _, ra := range seen {
		if _, ok := outcome.ParseRetryAfter(ra.value, p.s.cfg.Now()); !ok {
			p.set(CheckRetryAfter, Broken, "HTTP %d Retry-After %q is neither delay-seconds nor an HTTP-date", ra.status, ra.value)
			return
		}
		form := "seconds"
		if !isDigits(strings.TrimSpace(ra.value)) {
			form = "HTTP-date"
		}
		forms[fmt.Sprintf("%d: %s", ra.status, form)] = true
	}
	var list []string
	for f := range forms {
		list = append(list, f)
	}
	sort.Strings(list)
	p.setN(CheckRetryAfter, len(seen), Honoured, "%d values, all valid (%s)", len(seen), strings.Join(list, ", "))
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func containsBytes(list [][]byte, b []byte) bool {
	for _, x := range list {
		if bytes.Equal(x, b) {
			return true
		}
	}
	return false
}

func formatTally(t map[string]int) string {
	var keys []string
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s x%d", k, t[k]))
	}
	return strings.Join(parts, ", ")
}

// errorCodes returns the string members that name an error in a JSON body: "error",
// "code", "type", "title", and "error.code", "error.type" (the members idem's classifiers
// read).
func errorCodes(body []byte) []string {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return nil
	}
	var out []string
	add := func(m map[string]json.RawMessage) {
		for _, name := range []string{"code", "error", "type", "title"} {
			var s string
			if raw, ok := m[name]; ok && json.Unmarshal(raw, &s) == nil && s != "" {
				out = append(out, s)
			}
		}
	}
	add(top)
	var nested map[string]json.RawMessage
	if raw, ok := top["error"]; ok && json.Unmarshal(raw, &nested) == nil {
		add(nested)
	}
	return out
}
