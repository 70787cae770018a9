package idem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/profile"
)

// Every profile against idemtest speaking its provider's dialect, with the faults that
// lose an answer after the charge: judged per reference, net of cancels, no customer is
// charged twice, and every payment the application was told succeeded is charged once.
// An unknown outcome is either settled by the profile's route or left manual for a person,
// never paid again blindly and never stuck pending.
func TestEveryProfileAgainstItsDialect(t *testing.T) {
	faults := []idemtest.Fault{idemtest.Fault503, idemtest.Fault429, idemtest.FaultResetBeforeProcessing,
		idemtest.Fault502BeforeProcessing, idemtest.FaultDropAfterCommit, idemtest.Fault500AfterCommit,
		idemtest.FaultStored500, idemtest.FaultStored500AfterCharge}
	for _, seed := range []int64{3, 8} {
		for _, p := range profile.All() {
			t.Run(fmt.Sprintf("%s/seed%d", p.Name, seed), func(t *testing.T) {
				t.Parallel()
				ledgerRun(t, p, seed, faults)
			})
		}
	}
}

func ledgerRun(t *testing.T, p profile.Profile, seed int64, faults []idemtest.Fault) {
	clock := newFakeClock()
	srv := idemtest.NewServer(idemtest.Config{Dialect: p.Name, FaultRate: 0.4, Seed: seed, Faults: faults,
		RetryAfter: -1, Now: clock.Now})
	defer srv.Close()
	store := keystore.NewMemory()
	c, err := NewClient(Config{BaseURL: srv.URL, Store: store, Profile: p, Now: clock.Now, Sleep: clock.Sleep,
		Budget: BudgetConfig{Disabled: true}, Policy: Policy{MaxAttempts: 6}})
	require.NoError(t, err)
	defer c.Close()

	const n = 40
	told := map[string]bool{} // references the application was told succeeded
	paidAgain := 0
	pay := func(ref, intent string) error {
		_, err := c.Do(context.Background(), NewOperation(http.MethodPost, idemtest.PaymentsPath,
			paymentBody(100, ref), WithIntent(intent)))
		if err == nil {
			told[ref] = true
		}
		return err
	}
	for i := range n {
		ref := fmt.Sprintf("ord-%d", i)
		for try := 0; try < 3; try++ { // ErrNotExecuted: the one verdict after which it pays again
			if err := pay(ref, fmt.Sprintf("%s#%d", ref, try)); !errors.Is(err, ErrNotExecuted) {
				break
			}
			paidAgain++
		}
	}
	// Past every lag and landing, a restart's Recover settles what it can; a record whose
	// resend met another fault is continued by the next pass.
	var mu sync.Mutex // Recover reports from its workers
	for pass := 0; pass < 3; pass++ {
		clock.Advance(2 * time.Minute)
		var again []string
		_, err = c.Recover(context.Background(), func(r Reconciled) {
			mu.Lock()
			defer mu.Unlock()
			ref := reference(r.Record.Request.Body)
			if r.Err == nil {
				told[ref] = true
			}
			if errors.Is(r.Err, ErrNotExecuted) {
				again = append(again, ref)
			}
		})
		if err != nil {
			require.ErrorIs(t, err, ErrOutcomeUnknown)
		}
		for _, ref := range again {
			paidAgain++
			_ = pay(ref, fmt.Sprintf("%s#after-recover-%d", ref, pass))
		}
	}
	left, err := store.List(context.Background(), keystore.StateManual, keystore.StatePending)
	require.NoError(t, err)
	for _, r := range left {
		assert.Equal(t, keystore.StateManual, r.State, "%s is stuck pending: %s", reference(r.Request.Body), r.Error)
	}
	for i := range n {
		ref := fmt.Sprintf("ord-%d", i)
		charged, canceled := srv.ChargesByReference(ref)
		net := charged - canceled
		assert.LessOrEqual(t, net, 1, "%s charged %d times net of cancels", ref, net)
		if told[ref] {
			assert.Equal(t, 1, net, "%s was told succeeded", ref)
		}
	}
	t.Logf("%d told succeeded, %d paid again after a verdict of not executed, %d left for reconciliation (%s)",
		len(told), paidAgain, len(left), srv.Stats())
}

func reference(body []byte) string {
	var b struct{ Reference string }
	_ = json.Unmarshal(body, &b)
	return b.Reference
}
