package probe

import (
	"bytes"
	"context"
	"net/http"

	"github.com/idemkit/idem/outcome"
	"github.com/idemkit/idem/profile"
)

// keyReuse sends another body with the create key: 422 naming key reuse (or 400 naming it
// precisely, as Stripe answers), the answers idem's client reads as ErrKeyConflict.
func (p *prober) keyReuse(ctx context.Context, key, ref string) {
	a, met := p.settle(ctx, func() answer { return p.s.post(ctx, key, p.s.cfg.OtherBody(ref)) }, nil)
	p.addID(ref, a)
	p.reused = a
	switch {
	case transient(a): // every transport error included
		p.notObservedTransient(CheckKeyReuse, a, met)
	case (a.status == http.StatusUnprocessableEntity || a.status == http.StatusBadRequest) &&
		outcome.ClassifyStatusCode(&outcome.Attempt{Response: &http.Response{StatusCode: a.status}, Body: a.body}) == outcome.ClassKeyConflict:
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

// keyReuseByProfile regrades a key-reuse row that idem's default classifiers could not read:
// when the detected profile has a rule reading the answer as key reuse (PayPal's
// PAYPAL_REQUEST_ID_PREVIOUSLY_USED, Increase's idempotency_key_already_used_error), a client
// configured with that profile gets ErrKeyConflict, and the row is Honoured, saying so. A 2xx
// stays Broken whatever a profile says.
func (p *prober) keyReuseByProfile() {
	row, a := p.rows[CheckKeyReuse], p.reused
	if row.Result != Broken || p.dialect.Profile == "" || a.err != nil || a.status < 400 || a.status > 499 {
		return
	}
	pr, err := profile.ByName(p.dialect.Profile)
	if err != nil {
		return
	}
	if r := ruleMatch(pr, a); r != nil && r.Meaning == profile.KeyReuse {
		p.set(CheckKeyReuse, Honoured, "HTTP %d %s: read as key reuse by the %q profile's rule (not by idem's default classifiers)",
			a.status, short(a.body), pr.Name)
	}
}
