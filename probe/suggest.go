package probe

// suggestion is the idem client configuration that fits what the probe found.
func (p *prober) suggestion() Suggestion {
	cfg := p.s.cfg
	s := Suggestion{BaseURL: cfg.BaseURL, KeyHeader: cfg.KeyHeader, KeyConflictCodes: p.codes, Safe: true}
	if p.denied {
		s.Notes = append(s.Notes, "the API refused the probe's credentials (401 or 403): what follows rests on rows not observed; "+
			"probe again with them (probe.Config.Header, idemctl probe -auth-env NAME or -header)")
	}
	if p.rows[CheckKeyStatusCompleted].Result == Honoured && p.rows[CheckKeyStatusNotFound].Result != Broken {
		s.KeyStatusURL = cfg.KeyStatusPath
	} else {
		s.Notes = append(s.Notes, "no status endpoint that idem reads: an unknown outcome is resent with the same key, "+
			"safe only while the API keeps the key (KeyTTL); write a KeyStatusFunc if the API has one in another convention")
	}
	if p.found {
		s.LookupPath = cfg.SearchPath
	}
	for _, c := range []string{CheckReplay, CheckKeyReuse, CheckInProgress, CheckExecutesOnce} {
		if p.rows[c].Result == Broken {
			s.Safe = false
		}
	}
	if !s.Safe {
		s.Notes = append(s.Notes, "UNSAFE: a retry against this API can execute an operation twice or fail it wrongly; "+
			"send each operation once (Policy.MaxAttempts 1) until the broken rows are fixed")
	}
	if p.rows[CheckReplayMarker].Result != Honoured {
		s.Notes = append(s.Notes, "no Idempotent-Replayed marker: idem cannot tell a replay from a first answer (harmless)")
	}
	s.Notes = append(s.Notes, "KeyTTL: the probe cannot see how long the API keeps keys; set Config.KeyTTL to its "+
		"documented retention (idem's default 24 h, as Stripe)")
	return s
}
