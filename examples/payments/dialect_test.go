package main

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/profile"
)

// TestDialects runs the in-process demo (embedded server, one crash) in every dialect: no
// reference charged twice net of cancels, none lost, every acknowledged payment charged once
// under its id, and every payment that needs reconciliation accounted for by a manual or an
// unknown-outcome record (never paid again blindly). Small runs, one at a time (run in
// parallel on 2 cores, the 150 ms attempt timeouts turn into unknown outcomes): a few
// seconds each.
func TestDialects(t *testing.T) {
	for _, d := range idemtest.Dialects() {
		t.Run(d, func(t *testing.T) {
			t.Parallel() // each run has its own server, keystore file and children
			s, code, stderr := runJSONStderr(t, "-dialect", d, "-n", "30", "-crashes", "1", "-seed", "7", "-concurrency", "6")
			assert.Zero(t, s.Duplicates, s.DuplicateDetails)
			assert.Zero(t, s.Lost, s.LostDetails)
			assert.Zero(t, s.AckWrong, s.AckWrongDetails)
			assert.Zero(t, s.NotExecuted, s.NotExecutedDetails)
			if d == "idem" {
				assert.Empty(t, s.Dialect, "idem's JSON is as before -dialect")
			} else {
				assert.Equal(t, d, s.Dialect)
			}
			// Every payment is succeeded, failed (the invalid ones, and a key settled as not
			// executed on its last try), or needs reconciliation; one line of detail each.
			assert.Equal(t, s.Intents, s.Succeeded+s.Failed+s.NeedsReconciliation, "every payment accounted for")
			require.Len(t, s.NeedsReconciliationDetails, s.NeedsReconciliation)
			manual := 0
			for _, l := range s.NeedsReconciliationDetails {
				if strings.Contains(l, " manual (") {
					manual++
				}
			}
			assert.Equal(t, s.NeedsReconciliation-s.UnknownPending, manual, "the manual records")
			assert.Equal(t, s.Succeeded, s.ExecutedOnce-s.reconciledCharged(), "every succeeded payment charged once")
			if s.NeedsReconciliation > 0 {
				assert.Equal(t, 1, code)
				assert.Contains(t, stderr, "need reconciliation")
			} else {
				assert.Equal(t, 0, code)
			}
			if d == idemtest.DialectAdyen {
				assert.Equal(t, s.Canceled, s.NewIntents, "each cancel by reference undid one charge, then paid again")
			}
		})
	}
}

// reconciledCharged counts the payments needing reconciliation whose reference the ledger
// shows charged once: executed, but not (yet) known to the application.
func (s summary) reconciledCharged() int {
	n := 0
	for _, l := range s.NeedsReconciliationDetails {
		var charged, canceled int
		_, ledger, _ := strings.Cut(l, "(ledger: ")
		if _, err := fmt.Sscanf(ledger, "%d charges, %d canceled", &charged, &canceled); err == nil && charged-canceled == 1 {
			n++
		}
	}
	return n
}

// TestDialectFlag: an unknown dialect is refused with the names listed (exit 2, no panic);
// idem's routes are refused with another dialect; the profile is tuned to the embedded
// server only.
func TestDialectFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	assert.Equal(t, 2, run([]string{"-dialect", "klarna"}, &out, &errOut))
	assert.Empty(t, out.String())
	assert.Equal(t, `payments: -dialect: unknown dialect "klarna" (known: `+strings.Join(idemtest.Dialects(), ", ")+")\n", errOut.String())
	errOut.Reset()
	assert.Equal(t, 2, run([]string{"-dialect", ""}, &out, &errOut))
	errOut.Reset()
	assert.Equal(t, 2, run([]string{"-dialect", "stripe", "-lookup", ""}, &out, &errOut))
	assert.Contains(t, errOut.String(), "payments: -lookup: idem's routes; -dialect stripe settles with its profile's own routes")

	for _, d := range idemtest.Dialects() {
		_, err := profile.ByName(d)
		require.NoError(t, err, "every idemtest dialect has a profile")
	}
	// Embedded: stripe's search lag is the server's, checkout's landing covers the slow fault.
	stripe, err := apiSpec{Dialect: "stripe", Embedded: true}.profile()
	require.NoError(t, err)
	r, _ := stripe.Route(profile.SearchByReference)
	assert.Equal(t, embeddedSearchLag, r.Lag)
	assert.Equal(t, embeddedSearchLag, serverConfig(options{dialect: "stripe"}).SearchLag)
	checkout, err := apiSpec{Dialect: "checkout", Embedded: true}.profile()
	require.NoError(t, err)
	r, _ = checkout.Route(profile.SearchByReference)
	assert.Greater(t, r.Landing, serverConfig(options{dialect: "checkout"}).SlowDelay)
	// -target: as shipped.
	shipped, err := apiSpec{Dialect: "stripe"}.profile()
	require.NoError(t, err)
	assert.True(t, slices.EqualFunc(shipped.Settle, profile.Stripe.Settle, func(a, b profile.Route) bool { return a == b }))
	// idem: the flags' routes, nothing else.
	idemP, err := apiSpec{Dialect: "idem", StatusPath: "/s/{key}"}.profile()
	require.NoError(t, err)
	assert.Equal(t, []profile.Route{{Kind: profile.KeyStatus, Path: "/s/{key}"}, {Kind: profile.Resend}}, idemP.Settle)
}
