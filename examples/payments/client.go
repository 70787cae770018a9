package main

import (
	"net/http"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore"
)

// The demo's credentials. The tenant scopes keys locally; the server scopes them by the
// Authorization value. idem never writes the Authorization header to the keystore, so a
// restarted process supplies it again through Config.Credentials.
const (
	tenant = "acct_demo"
	apiKey = "sk_demo"
)

// paymentsPath is the endpoint every payment is POSTed to (relative to the base URL).
const paymentsPath = "/v1/payments"

// newClient is the one idem configuration used by every child and by the parent's final
// reconciliation, so that they all scope and send keys the same way.
//
// api names the dialect: its profile (apiSpec.profile) gives the key carrier, the reading
// of the provider's answers and the settling routes. Under idem those routes are the flags':
// the status endpoint and, if not empty, the search by reference ("{reference}" is
// replaced), the business lookup that settles a key the server stored a 5xx for. Without a
// route that can settle it such a payment waits for reconciliation and is never paid again
// blindly.
//
// fleet configures the client for a keystore shared by several sender processes: short
// leases (a killed sender's payments are continued by the others within LeaseTTL) and a
// background reclaimer that takes over what a dead sender left.
func newClient(baseURL string, api apiSpec, store keystore.Store, concurrency int, fleet bool) (*idem.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 2 * concurrency // the default 2 would redial most requests
	prof, err := api.profile()
	if err != nil {
		return nil, err
	}
	return idem.NewClient(idem.Config{
		Profile:    prof, // its routes become KeyStatusURL and Lookup (see apiSpec.profile)
		BaseURL:    baseURL,
		HTTPClient: &http.Client{Transport: tr},
		Store:      store,
		Tenant:     tenant,
		Credentials: func(r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+apiKey)
			return nil
		},
		Policy: idem.Policy{
			MaxAttempts: 8,
			MaxElapsed:  20 * time.Second,
			// Shorter than the server's slow fault (300ms): a slow answer becomes an
			// unknown outcome, which the status endpoint must resolve.
			AttemptTimeout: 150 * time.Millisecond,
			InitialDelay:   10 * time.Millisecond,
			MaxDelay:       200 * time.Millisecond,
			MaxRetryAfter:  5 * time.Second,
		},
		RecoverConcurrency: concurrency,
		Fleet:              idem.FleetConfig{LeaseTTL: fleetLease(fleet), ReclaimInterval: fleetReclaim(fleet)},
	})
}

// The fleet's lease and reclaim period: a killed sender holds its records at most
// fleetLeaseTTL (renewed every third of it while alive), much longer than the 150 ms attempt
// timeout; the survivors look for orphans every fleetReclaimEvery.
const (
	fleetLeaseTTL     = 2 * time.Second
	fleetReclaimEvery = 250 * time.Millisecond
)

func fleetLease(fleet bool) time.Duration {
	if fleet {
		return fleetLeaseTTL
	}
	return 0 // the default
}

func fleetReclaim(fleet bool) time.Duration {
	if fleet {
		return fleetReclaimEvery
	}
	return 0 // off
}
