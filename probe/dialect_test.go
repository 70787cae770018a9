package probe_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/probe"
)

// The probe names the dialect of docs/DIALECTS.md that idemtest speaks, for every dialect
// whose key travels in a header (square's is a body field, which the probe does not send),
// and suggests its profile. The key header is the caller's (-key-header); the rest comes from
// the answers.
func TestDetectsDialect(t *testing.T) {
	const stripeSearch = "/v1/payments/search?query=metadata['reference']:'{reference}'"
	for _, tc := range []struct {
		dialect, header string
		faults          []idemtest.Fault // random faults at 50% after the burst; nil: none
		search          string           // the search by reference; "" for the default
	}{
		{idemtest.DialectIdem, "", nil, ""},
		{idemtest.DialectIETF, "", nil, ""},
		{idemtest.DialectStripe, "", nil, stripeSearch},
		// A 5xx completed by the resend, counted once by the search, tells v2 from v1.
		{idemtest.DialectStripeV2, "", []idemtest.Fault{idemtest.FaultStored500AfterCharge}, stripeSearch},
		{idemtest.DialectAdyen, "", nil, ""},
		{idemtest.DialectPayPal, "PayPal-Request-Id", nil, ""},
		{idemtest.DialectCheckout, "Cko-Idempotency-Key", nil, ""},
		{idemtest.DialectGoCardless, "", nil, ""},
		{idemtest.DialectIncrease, "", nil, ""},
	} {
		t.Run(tc.dialect, func(t *testing.T) {
			t.Parallel()
			clk := &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
			// The stripe dialects' search lags idemtest.DefaultSearchLag: the probe waits it out
			// (Config.SearchLag) on the fake clock.
			cfg := idemtest.Config{Dialect: tc.dialect, SlowDelay: 200 * time.Millisecond, Seed: 3, Now: clk.Now}
			if tc.faults != nil {
				cfg.FaultRate, cfg.Faults = 0.5, tc.faults
			}
			api := idemtest.NewServer(cfg)
			t.Cleanup(api.Close)
			api.Script(idemtest.FaultNone, idemtest.FaultNone, idemtest.FaultNone)
			api.Script(slices.Repeat([]idemtest.Fault{idemtest.FaultSlow}, probe.DefaultConcurrency)...)
			rep := run(t, api.URL, func(c *probe.Config) {
				c.KeyHeader, c.SearchPath = tc.header, tc.search
				c.SearchLag, c.Sleep, c.Now = idemtest.DefaultSearchLag, clk.Sleep, clk.Now
				c.Trials = 9
			})
			if rep.Dialect.Profile != tc.dialect || rep.Suggestion.Profile != tc.dialect {
				t.Errorf("dialect %+v, want %s\n%s", rep.Dialect, tc.dialect, text(rep))
			}
			// PayPal's and Increase's key-reuse answers are not idem's default 422, but their
			// profiles read them as key reuse: honoured, naming the profile.
			if tc.dialect == idemtest.DialectPayPal || tc.dialect == idemtest.DialectIncrease {
				if r, _ := rep.Row(probe.CheckKeyReuse); r.Result != probe.Honoured || !strings.Contains(r.Evidence, `"`+tc.dialect+`" profile`) {
					t.Errorf("key-reuse = %s (%s)", r.Result, r.Evidence)
				}
			}
		})
	}
}
