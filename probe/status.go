package probe

import (
	"context"
	"net/http"

	"github.com/google/uuid"
	"github.com/idemkit/idem/outcome"
)

// statusNotFound asks the status endpoint about a key never sent.
func (p *prober) statusNotFound(ctx context.Context) {
	if p.s.cfg.KeyStatusPath == "-" {
		p.set(CheckKeyStatusNotFound, NotObserved, "no status endpoint configured")
		return
	}
	a := p.s.get(ctx, p.s.statusPath(uuid.NewString()))
	st := decode(a, p.s.cfg)
	switch st.State {
	case outcome.KeyStatusNotFound:
		p.set(CheckKeyStatusNotFound, Honoured, "HTTP 404 %s", short(a.body))
	case outcome.KeyStatusCompleted, outcome.KeyStatusProcessing:
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

// statusCompleted asks the status endpoint about key, whose answer had status want (a 2xx,
// or the stored 5xx of a key that never completed).
func (p *prober) statusCompleted(ctx context.Context, key string, want int) {
	if p.s.cfg.KeyStatusPath == "-" {
		p.set(CheckKeyStatusCompleted, NotObserved, "no status endpoint configured")
		return
	}
	a := p.s.get(ctx, p.s.statusPath(key))
	st := decode(a, p.s.cfg)
	switch {
	case st.State == outcome.KeyStatusCompleted && st.ResponseStatusCode == want:
		p.set(CheckKeyStatusCompleted, Honoured, "HTTP 200 completed, response_status %d", st.ResponseStatusCode)
	case st.State == outcome.KeyStatusCompleted:
		p.set(CheckKeyStatusCompleted, Broken, "completed with response_status %d, but the answer was %d", st.ResponseStatusCode, want)
	case st.State == outcome.KeyStatusNotFound:
		p.set(CheckKeyStatusCompleted, Broken, "reports not_found for an executed key: a client would resend it")
	case st.State == outcome.KeyStatusProcessing:
		p.set(CheckKeyStatusCompleted, Broken, "still processing after the operation answered")
	default:
		p.set(CheckKeyStatusCompleted, NotObserved, "%s at %s: no status endpoint in the default convention", a, p.s.cfg.KeyStatusPath)
	}
}

func decode(a answer, cfg Config) outcome.KeyStatus {
	if a.err != nil {
		return outcome.KeyStatus{}
	}
	return outcome.DecodeKeyStatus(a.status, a.header, a.body, cfg.Now())
}
