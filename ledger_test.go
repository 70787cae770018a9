package idem

// Tests judged on a server's ledger of charges per business reference (never per key), with
// a payments API whose every answer the test scripts: found by adversarial runs.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
)

// ledgerAPI is a payments API whose POST answers onPost scripts; its status endpoint
// (statusPath's convention) reports what store recorded per key.
type ledgerAPI struct {
	mu     sync.Mutex
	ledger map[string]int    // charges per reference
	keys   map[string]string // key -> stored answer body (status 201)
	posts  atomic.Int64
	onPost func(a *ledgerAPI, w http.ResponseWriter, key, ref string, n int64)
	srv    *httptest.Server
}

func newLedgerAPI(t *testing.T, onPost func(a *ledgerAPI, w http.ResponseWriter, key, ref string, n int64)) *ledgerAPI {
	a := &ledgerAPI{ledger: map[string]int{}, keys: map[string]string{}, onPost: onPost}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *ledgerAPI) serve(w http.ResponseWriter, r *http.Request) {
	if key, ok := strings.CutPrefix(r.URL.Path, "/v1/payments/operations/"); ok && r.Method == http.MethodGet {
		a.mu.Lock()
		body, done := a.keys[key]
		a.mu.Unlock()
		if !done {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"status":"not_found"}`)
			return
		}
		fmt.Fprintf(w, `{"status":"completed","response_status":201,"response_body":%s}`, body)
		return
	}
	n := a.posts.Add(1)
	b, _ := io.ReadAll(r.Body)
	var p struct{ Reference string }
	_ = json.Unmarshal(b, &p)
	a.onPost(a, w, r.Header.Get("Idempotency-Key"), p.Reference, n)
}

// charge executes a payment for ref under key, as a server that honours keys does.
func (a *ledgerAPI) charge(w http.ResponseWriter, key, ref string) {
	a.mu.Lock()
	_, replay := a.keys[key]
	if !replay {
		a.ledger[ref]++
		a.keys[key] = `{"id":"ch_1"}`
	}
	a.mu.Unlock()
	if replay {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(http.StatusCreated)
	fmt.Fprint(w, `{"id":"ch_1"}`)
}

func (a *ledgerAPI) charges(ref string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ledger[ref]
}

func ledgerClient(t *testing.T, a *ledgerAPI, mod func(*Config)) (*Client, *fakeClock) {
	clk := newFakeClock()
	cfg := Config{BaseURL: a.srv.URL, KeyStatusURL: statusPath, Now: clk.Now, Sleep: clk.Sleep,
		Budget: BudgetConfig{Disabled: true}, Store: keystore.NewMemory()}
	if mod != nil {
		mod(&cfg)
	}
	c, err := NewClient(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c, clk
}

// unavailable503 answers 503 with Retry-After: nothing executed.
func unavailable503(retryAfter string) func(*ledgerAPI, http.ResponseWriter, string, string, int64) {
	return func(_ *ledgerAPI, w http.ResponseWriter, _, _ string, _ int64) {
		w.Header().Set("Retry-After", retryAfter)
		w.WriteHeader(http.StatusServiceUnavailable)
	}
}

// slowStore runs hook after the n-th Update (1-based) and can make Create fail after it
// committed, as a connection lost after COMMIT does.
type slowStore struct {
	*keystore.Memory
	updates        atomic.Int64
	afterUpdate    func(n int64)
	createCommits  atomic.Bool // Create writes the record, then reports failCreate
	failCreate     error
	failGetOnce    atomic.Bool // the next Get fails (the store is still down)
	createAttempts atomic.Int64
}

func (s *slowStore) Update(ctx context.Context, r *keystore.Record) error {
	err := s.Memory.Update(ctx, r)
	if s.afterUpdate != nil {
		s.afterUpdate(s.updates.Add(1))
	}
	return err
}

func (s *slowStore) Create(ctx context.Context, r *keystore.Record) error {
	s.createAttempts.Add(1)
	if s.failCreate == nil {
		return s.Memory.Create(ctx, r)
	}
	if s.createCommits.Load() {
		if err := s.Memory.Create(ctx, r); err != nil {
			return err
		}
	}
	return s.failCreate
}

func (s *slowStore) Get(ctx context.Context, scope, key string) (*keystore.Record, error) {
	if s.failGetOnce.CompareAndSwap(true, false) {
		return nil, errors.New("store down")
	}
	return s.Memory.Get(ctx, scope, key)
}

// The caller's context ends right after a resend was decided and recorded (a slow progress
// write, or a cancel from OnRetry): retryablehttp's own wait sees it. The call ends
// ErrCanceled, not "outcome unknown": the 503 executed nothing.
func TestCancelAfterRetryDecidedIsCanceled(t *testing.T) {
	for _, where := range []string{"progress write", "OnRetry hook"} {
		t.Run(where, func(t *testing.T) {
			a := newLedgerAPI(t, unavailable503("1"))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			store := &slowStore{Memory: keystore.NewMemory()}
			c, _ := ledgerClient(t, a, func(cfg *Config) {
				cfg.Store = store
				if where == "progress write" {
					store.afterUpdate = func(n int64) {
						if n == 1 { // persistProgress before the backoff
							cancel()
						}
					}
				} else {
					cfg.Hooks.OnRetry = func(RetryEvent) { cancel() }
				}
			})
			_, err := c.Do(ctx, payment(1, "order-c"))
			oe := opErr(t, err)
			assert.ErrorIs(t, err, ErrCanceled)
			assert.NotErrorIs(t, err, ErrOutcomeUnknown)
			assert.False(t, oe.Unknown, "a 503 executed nothing")
			assert.EqualValues(t, 1, a.posts.Load())
			rec, gerr := store.Get(context.Background(), "", oe.Key)
			require.NoError(t, gerr)
			assert.Equal(t, keystore.StatePending, rec.State)
			assert.Equal(t, reasonCanceled, rec.Reason)
		})
	}
}

// A record left pending "not executed" (a 503 whose Retry-After was too long) is resumed
// past KeyTTL: the key is never resent (Config.KeyTTL), the call ends ErrKeyExpired.
// Within KeyTTL it is resent without a status check and charged once.
func TestNotExecutedKeyIsNotResentPastKeyTTL(t *testing.T) {
	for _, late := range []bool{false, true} {
		t.Run(fmt.Sprintf("late=%v", late), func(t *testing.T) {
			a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, n int64) {
				if n == 1 {
					unavailable503("3600")(a, w, key, ref, n)
					return
				}
				a.charge(w, key, ref)
			})
			c, clk := ledgerClient(t, a, nil)
			op := payment(1, "order-late", WithIntent("order-late"))
			_, err := c.Do(context.Background(), op)
			require.ErrorIs(t, err, ErrRetryAfterTooLong)
			if late {
				clk.Advance(DefaultKeyTTL + time.Hour)
			} else {
				clk.Advance(2 * time.Hour)
			}
			res, err := c.Do(context.Background(), op)
			if late {
				assert.ErrorIs(t, err, ErrKeyExpired)
				assert.True(t, opErr(t, err).Unknown)
				assert.EqualValues(t, 1, a.posts.Load(), "a key older than KeyTTL was resent")
				assert.Equal(t, 0, a.charges("order-late"))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, http.StatusCreated, res.StatusCode)
			assert.Equal(t, 1, a.charges("order-late"))
		})
	}
}

// Create commits but reports an error (the connection lost after COMMIT). Do reports that
// nothing was sent, and the caller pays again under a new key: Recover must not later send
// the first key too. Do withdraws it (failed, not executed); a Create that committed nothing
// leaves nothing; one whose record cannot be read back says so and names the key.
func TestCreateErrorWithdrawsTheRecord(t *testing.T) {
	lost := fmt.Errorf("pgstore: create: %w", context.DeadlineExceeded)
	for _, tc := range []struct {
		name      string
		committed bool
		getFails  bool
	}{
		{"committed", true, false},
		{"not committed", false, false},
		{"committed, unreadable", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, _ int64) { a.charge(w, key, ref) })
			store := &slowStore{Memory: keystore.NewMemory(), failCreate: lost}
			store.createCommits.Store(tc.committed)
			store.failGetOnce.Store(tc.getFails)
			c, clk := ledgerClient(t, a, func(cfg *Config) { cfg.Store = store })
			op := payment(1, "order-9")
			_, err := c.Do(context.Background(), op)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			assert.EqualValues(t, 0, a.posts.Load(), "nothing sent")
			rec, gerr := store.Memory.Get(context.Background(), "", op.Key())
			switch {
			case !tc.committed:
				assert.ErrorIs(t, gerr, keystore.ErrNotFound)
			case tc.getFails:
				require.NoError(t, gerr)
				assert.Equal(t, keystore.StatePending, rec.State)
				assert.Contains(t, err.Error(), op.Key())
				assert.Contains(t, err.Error(), "could not be withdrawn")
				return // the error told the caller to continue this key, not mint a new one
			default:
				require.NoError(t, gerr)
				assert.Equal(t, keystore.StateFailed, rec.State)
				assert.True(t, rec.NotExecuted)
				assert.Equal(t, ReasonNotExecuted, rec.Reason)
				// The same key again: not executed, nothing sent.
				_, err = c.Do(context.Background(), op)
				assert.ErrorIs(t, err, ErrNotExecuted)
			}
			// The caller pays again under a new key, and a later Recover sends nothing more.
			store.failCreate = nil
			_, err = c.Do(context.Background(), payment(1, "order-9"))
			require.NoError(t, err)
			clk.Advance(DefaultLeaseTTL + time.Second)
			_, err = c.Recover(context.Background(), nil)
			require.NoError(t, err)
			assert.Equal(t, 1, a.charges("order-9"), "Recover sent a key Do reported as never sent")
			assert.EqualValues(t, 1, a.posts.Load())
		})
	}
}
