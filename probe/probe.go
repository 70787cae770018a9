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

	"github.com/idemkit/idem"
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
	p := &prober{s: &sender{cfg: c}, rows: map[string]Row{}, ids: map[string][]string{}}
	p.run(ctx)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s := p.s; !s.answered {
		return nil, fmt.Errorf("%w: %s: no answer to %d requests (last: %v)", ErrUnreachable, c.BaseURL, s.sent, s.lastErr)
	}
	rep := &Report{Target: c.BaseURL + c.Path, Suggestion: p.suggestion(), Unauthorized: p.denied}
	for _, check := range Checks {
		rep.Rows = append(rep.Rows, p.rows[check])
	}
	return rep, nil
}

// prober holds one run's findings.
type prober struct {
	s      *sender
	rows   map[string]Row
	ids    map[string][]string // "id" members of the 2xx answers, per reference
	codes  []string            // key-reuse codes idem.IsKeyReuse does not recognise
	first  answer              // the create answer
	found  bool                // the search by reference found the probe's payments
	denied bool                // an answer refused the probe's credentials (unauthorized)
}

func (p *prober) set(check string, res Result, format string, args ...any) {
	p.rows[check] = Row{Check: check, Rule: rules[check], Result: res, Evidence: fmt.Sprintf(format, args...)}
}

func (p *prober) run(ctx context.Context) {
	p.statusNotFound(ctx)
	key1, ref1, ok := p.create(ctx)
	if !ok {
		for _, c := range Checks {
			if _, done := p.rows[c]; !done && c != CheckRetryAfter {
				p.set(c, NotObserved, "needs a successful create")
			}
		}
		p.retryAfter()
		return
	}
	p.replay(ctx, key1, ref1)
	p.keyReuse(ctx, key1, ref1)
	refs := p.inProgress(ctx)
	p.statusCompleted(ctx, key1)
	p.retryAfter()
	p.executesOnce(ctx, append([]string{ref1}, refs...)...)
}

// create sends one operation under a fresh key until it gets a 2xx, resending the same key
// after a transient answer. A replayed 5xx is that key's stored answer (execution began,
// effect unknown): the probe starts another operation under a new key, at most
// transientTries operations. Any other answer is Broken; only transient ones, NotObserved.
func (p *prober) create(ctx context.Context) (key, ref string, ok bool) {
	cfg := p.s.cfg
	var met []answer
	for range transientTries {
		key, ref = uuid.NewString(), "probe-"+uuid.NewString()
		a, t := p.settle(ctx, func() answer { return p.s.post(ctx, key, cfg.Body(ref)) }, nil)
		met = append(met, t...)
		p.first = a
		switch {
		case a.ok():
			p.addID(ref, a)
			p.set(CheckCreate, Honoured, "HTTP %d%s%s", a.status, idEvidence(a), transientNote(met))
			return key, ref, true
		case storedServerError(a):
			met = append(met, a)
			continue
		case transient(a):
			p.notObservedTransient(CheckCreate, a, met)
			return "", "", false
		case unauthorized(a):
			p.denied = true
			p.set(CheckCreate, NotObserved, "a fresh key got %s: %s", a, authAdvice)
			return "", "", false
		}
		p.set(CheckCreate, Broken, "a fresh key got %s%s", a, transientNote(met))
		return "", "", false
	}
	last := met[len(met)-1]
	p.notObservedTransient(CheckCreate, last, met[:len(met)-1])
	return "", "", false
}

// replay resends the create request: the same answer, ideally marked as a replay. A 409
// (still in progress) and transient answers are resent, a bounded number of times.
func (p *prober) replay(ctx context.Context, key, ref string) {
	a, met := p.settle(ctx, func() answer { return p.s.post(ctx, key, p.s.cfg.Body(ref)) },
		func(a answer) bool { return a.err == nil && a.status == http.StatusConflict })
	p.addID(ref, a)
	note := transientNote(met)
	switch {
	case a.err == nil && a.status == p.first.status && bytes.Equal(a.body, p.first.body):
		p.set(CheckReplay, Honoured, "HTTP %d, byte-identical body%s", a.status, note)
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
	if v := a.header.Get(ReplayedHeader); strings.EqualFold(v, "true") {
		p.set(CheckReplayMarker, Honoured, "%s: true", ReplayedHeader)
	} else {
		p.set(CheckReplayMarker, NotObserved, "no %s header on the replay", ReplayedHeader)
	}
}

// keyReuse sends another body with the create key: 422 naming key reuse (or 400 naming it
// precisely, as Stripe answers), the answers idem's client reads as ErrKeyConflict.
func (p *prober) keyReuse(ctx context.Context, key, ref string) {
	a, met := p.settle(ctx, func() answer { return p.s.post(ctx, key, p.s.cfg.OtherBody(ref)) }, nil)
	p.addID(ref, a)
	switch {
	case transient(a): // every transport error included
		p.notObservedTransient(CheckKeyReuse, a, met)
	case (a.status == http.StatusUnprocessableEntity || a.status == http.StatusBadRequest) &&
		idem.ClassifyStatusCode(&idem.Attempt{Response: &http.Response{StatusCode: a.status}, Body: a.body}) == idem.ClassKeyConflict:
		// The client's own rule: a 422 naming key reuse, or Stripe's 400 idempotency_error.
		p.set(CheckKeyReuse, Honoured, "HTTP %d %s", a.status, short(a.body))
	case a.status == http.StatusUnprocessableEntity:
		codes := errorCodes(a.body)
		if len(codes) == 0 {
			p.set(CheckKeyReuse, Broken, "HTTP 422 without a code naming key reuse (%s): a client cannot tell it from validation", short(a.body))
			return
		}
		p.codes = append(p.codes, codes[0])
		p.set(CheckKeyReuse, Honoured, "HTTP 422 code %q, not recognised by idem.IsKeyReuse: use idem.KeyConflictCodes", codes[0])
	case a.ok() && bytes.Equal(a.body, p.first.body):
		p.set(CheckKeyReuse, Broken, "HTTP %d replaying the first answer: the body is not part of the key's fingerprint", a.status)
	case a.ok():
		p.set(CheckKeyReuse, Broken, "HTTP %d%s: another request executed under a used key", a.status, idEvidence(a))
	default:
		p.set(CheckKeyReuse, Broken, "got %s, want 422 naming key reuse", a)
	}
}

// statusNotFound asks the status endpoint about a key never sent.
func (p *prober) statusNotFound(ctx context.Context) {
	if p.s.cfg.KeyStatusPath == "-" {
		p.set(CheckKeyStatusNotFound, NotObserved, "no status endpoint configured")
		return
	}
	a := p.s.get(ctx, p.s.statusPath(uuid.NewString()))
	st := decode(a, p.s.cfg)
	switch st.State {
	case idem.KeyStatusNotFound:
		p.set(CheckKeyStatusNotFound, Honoured, "HTTP 404 %s", short(a.body))
	case idem.KeyStatusCompleted, idem.KeyStatusProcessing:
		p.set(CheckKeyStatusNotFound, Broken, "a key never sent is %s (%s)", st.State, a)
	default:
		if unauthorized(a) {
			p.denied = true
			p.set(CheckKeyStatusNotFound, NotObserved, "%s at %s: %s", a, p.s.cfg.KeyStatusPath, authAdvice)
			return
		}
		p.set(CheckKeyStatusNotFound, NotObserved, "%s at %s: no status endpoint in the default convention", a, p.s.cfg.KeyStatusPath)
	}
}

// unauthorized reports an answer that refused the probe's credentials (401, 403): it says
// nothing of the contract, only that the probe was not let in.
func unauthorized(a answer) bool {
	return a.err == nil && (a.status == http.StatusUnauthorized || a.status == http.StatusForbidden)
}

// authAdvice is what an unauthorized answer's row says.
const authAdvice = "the API refused the probe's credentials; send them with probe.Config.Header (idemctl probe -auth-env NAME or -header)"

// statusCompleted asks the status endpoint about the create key.
func (p *prober) statusCompleted(ctx context.Context, key string) {
	if p.s.cfg.KeyStatusPath == "-" {
		p.set(CheckKeyStatusCompleted, NotObserved, "no status endpoint configured")
		return
	}
	a := p.s.get(ctx, p.s.statusPath(key))
	st := decode(a, p.s.cfg)
	switch {
	case st.State == idem.KeyStatusCompleted && st.ResponseStatusCode == p.first.status:
		p.set(CheckKeyStatusCompleted, Honoured, "HTTP 200 completed, response_status %d", st.ResponseStatusCode)
	case st.State == idem.KeyStatusCompleted:
		p.set(CheckKeyStatusCompleted, Broken, "completed with response_status %d, but the answer was %d", st.ResponseStatusCode, p.first.status)
	case st.State == idem.KeyStatusNotFound:
		p.set(CheckKeyStatusCompleted, Broken, "reports not_found for an executed key: a client would resend it")
	case st.State == idem.KeyStatusProcessing:
		p.set(CheckKeyStatusCompleted, Broken, "still processing after the operation answered")
	default:
		p.set(CheckKeyStatusCompleted, NotObserved, "%s at %s: no status endpoint in the default convention", a, p.s.cfg.KeyStatusPath)
	}
}

func decode(a answer, cfg Config) idem.KeyStatus {
	if a.err != nil {
		return idem.KeyStatus{}
	}
	return idem.DecodeKeyStatus(a.status, a.header, a.body, cfg.Now())
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
		if _, ok := idem.ParseRetryAfter(ra.value, p.s.cfg.Now()); !ok {
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
	p.set(CheckRetryAfter, Honoured, "%d values, all valid (%s)", len(seen), strings.Join(list, ", "))
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
