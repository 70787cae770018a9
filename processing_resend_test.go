package idem

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

// checkpointAPI is a payment API whose handler works in two phases: the first request of a key
// commits phase 1 and then its process dies (no answer). The key is then "processing" at the
// status endpoint for as long as nobody finishes it. A request with the key finishes it (a
// takeover, once the dead owner's lease has passed: ownerAlive false) or gets 409 while the
// owner still runs it (ownerAlive true).
type checkpointAPI struct {
	mu         sync.Mutex
	ownerAlive bool
	state      map[string]string // key -> "phase1" | "done"
	charges    map[string]int    // reference -> charges
	posts      int
}

func (a *checkpointAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if key, ok := strings.CutPrefix(r.URL.Path, "/v1/payments/operations/"); ok {
		switch a.state[key] {
		case "":
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"status":"not_found"}`)
		case "phase1":
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprint(w, `{"status":"processing"}`)
		default:
			fmt.Fprint(w, `{"status":"completed","response_status":201,"response_body":{"id":"pay_1"}}`)
		}
		return
	}
	a.posts++
	key := r.Header.Get("Idempotency-Key")
	switch a.state[key] {
	case "":
		a.state[key] = "phase1"
		panic(http.ErrAbortHandler) // phase 1 committed, then the process died
	case "phase1":
		if a.ownerAlive {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusConflict)
			return
		}
		a.state[key] = "done" // taken over: phase 2 runs once
		a.charges["order-c"]++
	}
	w.WriteHeader(http.StatusCreated)
	fmt.Fprint(w, `{"id":"pay_1"}`)
}

// A status endpoint that says "processing" at every check, for a key whose owner died after a
// checkpoint: only a request with the key resumes it. Before, the client asked until its checks
// ran out and ended with ErrOutcomeUnknown, and every later Do and Recover did the same: the
// payment stayed half done for good. Now it resends the key after its checks, which resumes
// an abandoned key and, while the owner still runs it, gets 409 (never a second execution).
func TestProcessingAtEveryCheckResendsTheKey(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ownerAlive bool
	}{{"owner died: the resend resumes it", false}, {"owner alive: the resend gets 409", true}} {
		t.Run(tc.name, func(t *testing.T) {
			a := &checkpointAPI{ownerAlive: tc.ownerAlive, state: map[string]string{}, charges: map[string]int{}}
			srv := httptest.NewServer(a)
			defer srv.Close()
			clock := newFakeClock()
			c, err := NewClient(Config{BaseURL: srv.URL, KeyStatusURL: statusPath, Store: keystore.NewMemory(),
				Now: clock.Now, Sleep: clock.Sleep, Budget: BudgetConfig{Disabled: true},
				Policy: Policy{MaxAttempts: 3, MaxKeyStatusChecks: 2}})
			require.NoError(t, err)
			defer c.Close()

			res, err := c.Do(context.Background(), payment(1250, "order-c", WithIntent("order-c")))
			a.mu.Lock()
			defer a.mu.Unlock()
			if !tc.ownerAlive {
				require.NoError(t, err)
				assert.Equal(t, http.StatusCreated, res.StatusCode)
				assert.Equal(t, 2, res.Attempts, "the first request, then the resend after the checks")
				assert.Equal(t, 2, res.KeyStatusChecks)
				assert.Equal(t, 1, a.charges["order-c"])
				// Each ask's Retry-After is honoured, the last one's before the resend too.
				assert.Equal(t, []time.Duration{7 * time.Second, 7 * time.Second, 0}, clock.Sleeps(), "no backoff added after the wait")
				return
			}
			require.ErrorIs(t, err, ErrOutcomeUnknown, "still running elsewhere: maybe paid, never a failure")
			assert.Equal(t, 3, a.posts, "bounded by MaxAttempts")
			assert.Zero(t, a.charges["order-c"], "the live owner's key was never executed twice")
		})
	}
}

// A key whose status checks carried it past KeyTTL is never resent: the server may have
// forgotten it. Before, a resumed record said "processing" at every check was resent after
// the last check's wait, KeyTTL or not; and one the status endpoint could not answer about
// stayed pending for good instead of going to a business lookup or a person (manual).
func TestStatusChecksPastKeyTTLGoManual(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status func(a *checkpointAPI) outcome.KeyStatusFunc
	}{
		{"processing at every check, the wait passes KeyTTL", nil},
		{"no usable answer, past KeyTTL", func(*checkpointAPI) outcome.KeyStatusFunc {
			return func(context.Context, outcome.KeyStatusRequest) (outcome.KeyStatus, error) {
				return outcome.KeyStatus{State: outcome.KeyStatusUnknown}, nil
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &checkpointAPI{state: map[string]string{}, charges: map[string]int{}}
			srv := httptest.NewServer(a)
			defer srv.Close()
			clock := newFakeClock()
			store := keystore.NewMemory()
			cfg := Config{BaseURL: srv.URL, KeyStatusURL: statusPath, Store: store, KeyTTL: time.Hour,
				Now: clock.Now, Sleep: clock.Sleep, Budget: BudgetConfig{Disabled: true},
				Policy: Policy{MaxAttempts: 1, MaxKeyStatusChecks: 2}}
			if tc.status != nil {
				cfg.KeyStatusURL, cfg.KeyStatusFunc = "", tc.status(a)
			}
			c, err := NewClient(cfg)
			require.NoError(t, err)
			defer c.Close()
			op := payment(1250, "order-c", WithIntent("order-c"))
			_, err = c.Do(context.Background(), op) // phase 1 committed, no answer; one attempt only
			require.ErrorIs(t, err, ErrOutcomeUnknown)
			require.NoError(t, c.Close()) // a restart: no hold on the record

			clock.Advance(time.Hour - 5*time.Second) // 7 s waits between checks pass KeyTTL
			if tc.status != nil {
				clock.Advance(10 * time.Second) // already past KeyTTL
			}
			c2, err := NewClient(cfg)
			require.NoError(t, err)
			defer c2.Close()
			_, err = c2.Do(context.Background(), op)
			require.ErrorIs(t, err, ErrKeyExpired)
			rec, err := store.Get(context.Background(), "", op.Key())
			require.NoError(t, err)
			assert.Equal(t, keystore.StateManual, rec.State, "a lookup or a person settles it")
			a.mu.Lock()
			defer a.mu.Unlock()
			assert.Equal(t, 1, a.posts, "never resent past KeyTTL")
			assert.Zero(t, a.charges["order-c"])
		})
	}
}
