package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/profile"
)

// The embedded server's figures, shared by serverConfig and the profiles tuned to it.
const (
	// slowDelay is how long the server's slow fault holds a request: longer than the
	// client's 150 ms attempt timeout, so that a slow answer becomes an unknown outcome.
	slowDelay = 300 * time.Millisecond
	// embeddedSearchLag is how long a charge stays invisible to the embedded server's stripe
	// search (idemtest's default, set explicitly so that the profile can name it).
	embeddedSearchLag = idemtest.DefaultSearchLag
	// landingMargin is added to slowDelay to bound how long a request whose answer never
	// came may still execute at the embedded server: the slow fault's hold, plus scheduling
	// on a loaded 2-core machine (a race-detector test run).
	landingMargin = time.Second
)

// dialectNames lists the names -dialect accepts: idemtest's dialects, each of which has a
// profile of the same name.
func dialectNames() string { return strings.Join(idemtest.Dialects(), ", ") }

// checkDialect refuses a name that is not both an idemtest dialect (the embedded server)
// and a profile (the client).
func checkDialect(name string) error {
	_, perr := profile.ByName(name)
	if idemtest.ValidDialect(name) != nil || name == "" || perr != nil {
		return fmt.Errorf("-dialect: unknown dialect %q (known: %s)", name, dialectNames())
	}
	return nil
}

// apiSpec says how the client speaks to the API: its dialect, whether the API is the
// embedded server (whose figures the profile is tuned to), and idem's own routes from the
// flags (-status-path, -lookup), which only the idem dialect uses.
type apiSpec struct {
	Dialect    string `json:"dialect"`
	Embedded   bool   `json:"embedded"`
	StatusPath string `json:"status_path"`
	LookupPath string `json:"lookup_path"`
}

// idem reports whether the client speaks idem's own dialect (status endpoint and search by
// reference from the flags).
func (a apiSpec) idem() bool { return a.Dialect == "" || a.Dialect == idemtest.DialectIdem }

// profile returns the client's profile. For idem, the profile's settling routes are the
// flags' (-status-path, -lookup; either may be empty: no such route), so that the default
// run behaves as before profiles existed. For the other dialects the profile's own routes
// settle unknown outcomes; against the embedded server two figures are tuned to it (see
// tuneEmbedded). With -target the profile is used as shipped.
func (a apiSpec) profile() (profile.Profile, error) {
	name := a.Dialect
	if name == "" {
		name = idemtest.DialectIdem
	}
	p, err := profile.ByName(name)
	if err != nil {
		return p, err
	}
	if a.idem() {
		p.Settle = nil
		if a.StatusPath != "" {
			p.Settle = append(p.Settle, profile.Route{Kind: profile.KeyStatus, Path: a.StatusPath})
		}
		if a.LookupPath != "" {
			p.Settle = append(p.Settle, profile.Route{Kind: profile.SearchByReference, Path: a.LookupPath})
		}
		p.Settle = append(p.Settle, profile.Route{Kind: profile.Resend})
		return p, nil
	}
	if a.Embedded {
		tuneEmbedded(&p)
	}
	return p, nil
}

// tuneEmbedded adjusts a shipped profile to the embedded server's known figures, where the
// provider's real ones would only make the demo wait:
//   - a search lag (Stripe: about a minute at the real API) becomes the embedded server's
//     SearchLag (embeddedSearchLag, 2 s): a "not found" counts 2 s after the last send;
//   - a cancel's 2xx means the charges are canceled (Route.Async off): the embedded server
//     cancels at once, where Adyen sends the outcome later by an event;
//   - a search's or a cancel's Landing (Checkout.com, Adyen: the default minute, the time a
//     request whose answer never came may still execute) becomes the embedded server's
//     slowest request, its slow fault's hold plus a margin (slowDelay + landingMargin).
//
// Both stay on the safe side of the embedded server: no charge is invisible longer than
// SearchLag, and no request executes later than slowDelay after it arrived.
func tuneEmbedded(p *profile.Profile) {
	for i := range p.Settle {
		r := &p.Settle[i]
		if r.Kind == profile.CancelByReference {
			r.Landing = slowDelay + landingMargin
			// The embedded server cancels at once (docs/DIALECTS.md's convention), where
			// Adyen accepts a cancel and reports its outcome later by an event.
			r.Async = false
		}
		if r.Kind != profile.SearchByReference {
			continue
		}
		if r.Lag > 0 {
			r.Lag = embeddedSearchLag
		}
		if p.Replay == profile.ReplayNothingOnError {
			r.Landing = slowDelay + landingMargin
		}
	}
}

// oracleSearch returns the search by reference the -target oracle uses: -lookup for idem,
// else the profile's own SearchByReference route ("" if it has none), and the search's lag.
func (a apiSpec) oracleSearch() (path string, lag time.Duration) {
	if a.idem() {
		return a.LookupPath, 0
	}
	p, err := a.profile()
	if err != nil {
		return "", 0
	}
	if r, ok := p.Route(profile.SearchByReference); ok {
		return r.Path, r.Lag
	}
	return "", 0
}

// oracleStatus returns the status endpoint the -target oracle asks per key: -status-path for
// idem, none for the other dialects (no provider has idem's status endpoint).
func (a apiSpec) oracleStatus() string {
	if a.idem() {
		return a.StatusPath
	}
	return ""
}

// settledByRoute reports a record note left by a settling route: the search by reference
// ("lookup: ...") or a cancel by reference.
func settledByRoute(note string) bool {
	return strings.HasPrefix(note, "lookup:") || strings.HasPrefix(note, "cancel by reference:")
}

// dialectNote describes a dialect's client profile in one line for the table's header.
func dialectNote(name string, embedded bool) string {
	p, err := apiSpec{Dialect: name, Embedded: embedded}.profile()
	if err != nil {
		return err.Error()
	}
	carrier := "header " + p.KeyHeader
	if p.KeyField != "" {
		carrier = "body member " + p.KeyField
	}
	var routes []string
	for _, r := range p.Settle {
		s := r.Kind.String()
		if r.Lag > 0 {
			s += fmt.Sprintf(" (lag %s)", r.Lag)
		}
		if r.Landing > 0 {
			s += fmt.Sprintf(" (landing %s)", r.Landing)
		}
		routes = append(routes, s)
	}
	tuned := "as shipped"
	if embedded {
		tuned = "tuned to the embedded server"
	}
	return fmt.Sprintf("key in %s, repeats answer %s, settled by %s (profile %s)",
		carrier, p.Replay, strings.Join(routes, ", then "), tuned)
}
