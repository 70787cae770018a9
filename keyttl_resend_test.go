package idem

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/outcome"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// forgetful charges like ledgerAPI.charge, but forgets a key KeyTTL after it first stored it
// (its retention window), as servers do by the README's contract.
type forgetful struct {
	mu   sync.Mutex
	seen map[string]time.Time
	now  func() time.Time
}

func (f *forgetful) charge(a *ledgerAPI, w http.ResponseWriter, key, ref string) {
	f.mu.Lock()
	if at, ok := f.seen[key]; ok && f.now().Sub(at) > DefaultKeyTTL {
		a.mu.Lock()
		delete(a.keys, key) // past retention: forgotten
		a.mu.Unlock()
		delete(f.seen, key)
	}
	if _, ok := f.seen[key]; !ok {
		f.seen[key] = f.now()
	}
	f.mu.Unlock()
	a.charge(w, key, ref)
}

// A resumed record (its first request charged, the answer lost) was resent a little before
// KeyTTL; the answer asked to wait (a 503 with Retry-After, or a 409 in progress), and the
// resend after the wait went out past KeyTTL, to a server that had forgotten the key:
// charged twice (adversarial run; no status endpoint, the check ran only on the unknown
// outcome's path). A key ever sent is never resent past KeyTTL, whatever made it due.
func TestResendAfterAWaitNeverCrossesKeyTTL(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait func(w http.ResponseWriter)
	}{
		{"503 Retry-After", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "20")
			w.WriteHeader(http.StatusServiceUnavailable)
		}},
		{"409 in progress", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "20")
			w.WriteHeader(http.StatusConflict)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var now func() time.Time
			f := &forgetful{seen: map[string]time.Time{}, now: func() time.Time { return now() }}
			a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, n int64) {
				switch n {
				case 1: // charged, the answer lost
					f.charge(a, discardWriter{}, key, ref)
					panic(http.ErrAbortHandler)
				case 2:
					tc.wait(w)
				default:
					f.charge(a, w, key, ref)
				}
			})
			c, clk := ledgerClient(t, a, func(cfg *Config) {
				cfg.KeyStatusURL = "" // resent while younger than KeyTTL, never after
				cfg.Policy = Policy{MaxAttempts: 1}
			})
			now = clk.Now
			op := payment(1, "order-ttl", WithIntent("order-ttl"))
			_, err := c.Do(context.Background(), op)
			require.ErrorIs(t, err, ErrOutcomeUnknown)

			clk.Advance(DefaultKeyTTL - 10*time.Second) // inside KeyTTL: a resend is allowed
			_, err = c.Do(context.Background(), op, CallMaxAttempts(3))
			require.ErrorIs(t, err, ErrKeyExpired)
			assert.Equal(t, 1, a.charges("order-ttl"), "resent past KeyTTL and charged again")
			assert.EqualValues(t, 2, a.posts.Load(), "the resend before KeyTTL, none after")
		})
	}
}

// sentLate makes op's record in a's client, with Credentials refusing that first call (no
// request of the key ever left), and moves the clock past KeyTTL: the next Do sends the key
// for the first time, as new. mod adds to the client's Config.
func sentLate(t *testing.T, a *ledgerAPI, ref string, mod func(*Config)) (*Client, *Operation) {
	t.Helper()
	var refuse atomic.Bool
	refuse.Store(true)
	c, clk := ledgerClient(t, a, func(cfg *Config) {
		cfg.Credentials = func(r *http.Request) error {
			if refuse.Load() {
				return errors.New("vault unreachable")
			}
			return nil
		}
		if mod != nil {
			mod(cfg)
		}
	})
	op := payment(1, ref, WithIntent(ref))
	_, err := c.Do(context.Background(), op)
	require.ErrorIs(t, err, ErrInvalidOperation)
	refuse.Store(false)
	clk.Advance(DefaultKeyTTL + time.Hour)
	return c, op
}

// A key no request of which left before (Credentials refused the first call) was sent, right
// as new, past KeyTTL; its first answer was a 503 with Retry-After: 1, and the resend a
// second later went manual as an expired key, a payment never executed waiting for a person
// (adversarial run). The server first saw the key at this call's first request: the resend
// goes out.
func TestKeyFirstSentPastKeyTTLIsResent(t *testing.T) {
	a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, n int64) {
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		a.charge(w, key, ref)
	})
	c, op := sentLate(t, a, "order-late", nil)
	res, err := c.Do(context.Background(), op)
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, res.StatusCode)
	assert.Equal(t, 1, a.charges("order-late"))
	assert.EqualValues(t, 2, a.posts.Load())
}

// As TestKeyFirstSentPastKeyTTLIsResent, but the first request of the key (sent now, past
// KeyTTL of the record's CreatedAt, because Credentials refused the first call) ends with no
// answer. The status checks judge the key's age as the resend does (resendExpired: from this
// call's start for a key never sent before it): "not found" and an unusable status endpoint
// went manual (ErrKeyExpired) although the server first saw the key seconds ago (adversarial
// run).
func TestKeyFirstSentPastKeyTTLAskedAboutIsResent(t *testing.T) {
	for _, statusDown := range []bool{false, true} {
		name := "status not found"
		if statusDown {
			name = "status endpoint 503"
		}
		t.Run(name, func(t *testing.T) {
			a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, n int64) {
				if n == 1 {
					panic(http.ErrAbortHandler) // nothing executed, the connection dropped
				}
				a.charge(w, key, ref)
			})
			c, op := sentLate(t, a, "order-late2", func(cfg *Config) {
				if statusDown {
					cfg.KeyStatusFunc = func(context.Context, outcome.KeyStatusRequest) (outcome.KeyStatus, error) {
						return outcome.KeyStatus{}, errors.New("status endpoint 503")
					}
					cfg.KeyStatusURL = ""
				}
			})
			res, err := c.Do(context.Background(), op)
			assert.NotErrorIs(t, err, ErrKeyExpired, "a key first sent seconds ago judged expired: manual")
			if !statusDown {
				require.NoError(t, err, "not found: resent with the same key")
				assert.Equal(t, http.StatusCreated, res.StatusCode)
			} else {
				require.ErrorIs(t, err, ErrOutcomeUnknown, "the status endpoint cannot tell: pending")
				assert.Zero(t, a.charges("order-late2"), "not resent while nothing can tell")
				return
			}
			assert.Equal(t, 1, a.charges("order-late2"))
		})
	}
}
