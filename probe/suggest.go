package probe

import (
	"fmt"
	"strings"

	"github.com/idemkit/idem/profile"
)

// suggestion is the idem client configuration that fits what the probe found, under the
// run's verdict.
func (p *prober) suggestion(v Verdict) Suggestion {
	cfg := p.s.cfg
	s := Suggestion{BaseURL: cfg.BaseURL, KeyHeader: cfg.KeyHeader, KeyConflictCodes: p.codes,
		Safe: v == VerdictSafe, Profile: p.dialect.Profile}
	if p.denied {
		s.Notes = append(s.Notes, "the API refused the probe's credentials (401 or 403): what follows rests on rows not observed; "+
			"probe again with them (probe.Config.Header, idemctl probe -auth-env NAME or -header)")
	}
	completed, notFound := p.rows[CheckKeyStatusCompleted], p.rows[CheckKeyStatusNotFound]
	switch {
	case completed.Result == Honoured && notFound.Result != Broken:
		s.KeyStatusURL = cfg.KeyStatusPath
	case notFound.Result == Honoured:
		s.Notes = append(s.Notes, fmt.Sprintf("KeyStatusURL not suggested: the status endpoint answered not_found for a key never sent, "+
			"but was not seen to report an executed key (status-completed %s); an endpoint that says not_found for every key "+
			"would make idem resend a payment that was executed", completed.Result))
	default:
		s.Notes = append(s.Notes, "no status endpoint that idem reads: an unknown outcome is resent with the same key, "+
			"safe only while the API keeps the key (KeyTTL); write a KeyStatusFunc if the API has one in another convention")
	}
	if p.found {
		s.LookupPath = cfg.SearchPath
	}
	switch v {
	case VerdictUnsafe:
		s.Notes = append(s.Notes, "UNSAFE: a retry against this API can execute an operation twice or fail it wrongly; "+
			"send each operation once (Policy.MaxAttempts 1) until the broken rows are fixed")
	case VerdictNotProven:
		var missing []string
		for _, c := range SafetyChecks {
			if p.rows[c].Result != Honoured {
				missing = append(missing, c)
			}
		}
		s.Notes = append(s.Notes, fmt.Sprintf("NOT PROVEN SAFE: %s not observed; what the probe did not see is not called safe. "+
			"A search by reference (-search-path) lets it count charges; more trials (-trials) meet more 5xx", strings.Join(missing, ", ")))
	}
	if d := p.dialect; d.Profile != "" {
		n := fmt.Sprintf("the answers fit the %q dialect of docs/DIALECTS.md: start from profile.ByName(%q) "+
			"and set each Route.Path to this API's endpoints", d.Profile, d.Profile)
		if pr, err := profile.ByName(d.Profile); err == nil && pr.Replay == profile.ReplayNothingOnError {
			n += "; a repeat of a key executes again after an error there, and the profile searches by reference before any resend"
		}
		s.Notes = append(s.Notes, n)
	}
	switch p.rows[CheckReplayMarker].Result {
	case Honoured:
	case Broken:
		s.Notes = append(s.Notes, "Idempotent-Replayed: true on first answers too: idem reports such answers as replays, "+
			"and reads a first 5xx so marked as a stored one (not retried; settled by a lookup or Resolve)")
	default:
		s.Notes = append(s.Notes, "no Idempotent-Replayed marker: idem cannot tell a replay from a first answer (harmless)")
	}
	if cfg.Retention > 0 {
		s.Notes = append(s.Notes, fmt.Sprintf("KeyTTL: at most the advertised retention, %s", cfg.Retention))
	} else {
		s.Notes = append(s.Notes, "KeyTTL: the probe cannot see how long the API keeps keys; set Config.KeyTTL to its "+
			"documented retention (idem's default 24 h, as Stripe)")
	}
	return s
}
