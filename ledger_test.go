package idem

// Tests judged on a server's ledger of charges per business reference (never per key), with
// a payments API whose every answer the test scripts: found by adversarial runs.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/event"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
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

// slowStore runs hook after the n-th Update (1-based) and can make the next Create fail: with
// the record committed (a connection lost after COMMIT), or not yet (an INSERT still waiting,
// which the test may land later), or committed and then taken over by another instance.
type slowStore struct {
	*keystore.Memory
	updates     atomic.Int64
	afterUpdate func(n int64)
	failCreate  createFailure
	failGetOnce atomic.Bool // the next Get fails (the store is still down)
	late        *keystore.Record
}

type createFailure int

const (
	createOK createFailure = iota
	createLost
	createCommittedLost
	createCommittedTakenOver
)

var errCreateLost = fmt.Errorf("pgstore: create: %w", context.DeadlineExceeded)

func (s *slowStore) Update(ctx context.Context, r *keystore.Record) error {
	err := s.Memory.Update(ctx, r)
	if s.afterUpdate != nil {
		s.afterUpdate(s.updates.Add(1))
	}
	return err
}

func (s *slowStore) Create(ctx context.Context, r *keystore.Record) error {
	f := s.failCreate
	s.failCreate = createOK // once
	switch f {
	case createLost:
		cp := *r
		s.late = &cp // may still land: the test decides
		return errCreateLost
	case createCommittedLost, createCommittedTakenOver:
		if err := s.Memory.Create(ctx, r); err != nil {
			return err
		}
		if f == createCommittedTakenOver { // another instance claimed it past the lease and sent it
			_, err := s.Memory.Claim(ctx, r.Scope, r.Key, keystore.Lease{Owner: "instance-b",
				Now: r.LeaseUntil.Add(time.Second), Until: r.LeaseUntil.Add(time.Minute)})
			if err != nil {
				return err
			}
			got, _ := s.Memory.Get(ctx, r.Scope, r.Key)
			got.Attempts = 1
			if err := s.Memory.Update(ctx, got); err != nil {
				return err
			}
		}
		return errCreateLost
	}
	return s.Memory.Create(ctx, r)
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
					cfg.Hooks.OnRetry = func(event.Retry) { cancel() }
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
// Within KeyTTL it is resent without a status check and charged once. A record that was
// never sent at all (Credentials failed) goes out past KeyTTL too: the server never saw it.
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

func TestNeverSentKeyIsSentPastKeyTTL(t *testing.T) {
	a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, _ int64) { a.charge(w, key, ref) })
	var credFail atomic.Bool
	credFail.Store(true)
	c, clk := ledgerClient(t, a, func(cfg *Config) {
		cfg.Credentials = func(r *http.Request) error {
			if credFail.Load() {
				return errors.New("vault unreachable")
			}
			r.Header.Set("Authorization", "Bearer k")
			return nil
		}
	})
	op := payment(1, "order-cred", WithIntent("order-cred"))
	_, err := c.Do(context.Background(), op)
	require.ErrorIs(t, err, ErrInvalidOperation)
	assert.EqualValues(t, 0, a.posts.Load())
	credFail.Store(false)
	clk.Advance(DefaultKeyTTL + time.Hour)
	res, err := c.Do(context.Background(), op)
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, res.StatusCode)
	assert.Equal(t, 1, a.charges("order-cred"))
}

// Create reports an error, having committed or not (yet). Do reports that nothing was sent,
// and the caller pays again under a new key: Recover must never send the first key too. Do
// withdraws it: a committed record is marked failed, not executed; where none is found yet, a
// tombstone takes the key, so that a late commit fails. When it cannot settle the key (the
// store still down, another instance took the record over), the error names the key and says
// to continue with it rather than pay again.
func TestCreateErrorWithdrawsTheRecord(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fail     createFailure
		getFails bool
		settled  bool // withdrawn: the caller may pay again under a new key
	}{
		{"committed", createCommittedLost, false, true},
		{"not committed yet, lands late", createLost, false, true},
		{"committed, unreadable", createCommittedLost, true, false},
		{"committed, taken over and sent by another instance", createCommittedTakenOver, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, _ int64) { a.charge(w, key, ref) })
			store := &slowStore{Memory: keystore.NewMemory(), failCreate: tc.fail}
			store.failGetOnce.Store(tc.getFails)
			c, clk := ledgerClient(t, a, func(cfg *Config) { cfg.Store = store })
			op := payment(1, "order-9")
			_, err := c.Do(context.Background(), op)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			assert.EqualValues(t, 0, a.posts.Load(), "nothing sent")
			if !tc.settled {
				assert.Contains(t, err.Error(), op.Key())
				assert.Contains(t, err.Error(), "could not be withdrawn")
				return // the caller continues this key (same operation or intent), never a new one
			}
			assert.NotContains(t, err.Error(), "could not be withdrawn")
			if store.late != nil { // the INSERT that was still waiting lands now: the tombstone wins
				assert.ErrorIs(t, store.Memory.Create(context.Background(), store.late), keystore.ErrExists)
			}
			rec, gerr := store.Memory.Get(context.Background(), "", op.Key())
			require.NoError(t, gerr)
			assert.Equal(t, keystore.StateFailed, rec.State)
			assert.True(t, rec.NotExecuted)
			assert.Equal(t, keystore.ReasonWithdrawn, rec.Reason)
			assert.Zero(t, rec.Attempts)
			// The same key again: not executed, nothing sent.
			_, err = c.Do(context.Background(), op)
			assert.ErrorIs(t, err, ErrNotExecuted)
			// The caller pays again under a new key, and a later Recover sends nothing more.
			_, err = c.Do(context.Background(), payment(1, "order-9"))
			require.NoError(t, err)
			clk.Advance(defaultLeaseTTL + time.Second)
			_, err = c.Recover(context.Background(), nil)
			require.NoError(t, err)
			assert.Equal(t, 1, a.charges("order-9"), "Recover sent a key Do reported as never sent")
			assert.EqualValues(t, 1, a.posts.Load())
		})
	}
}

// A panic inside a call (here the application's KeyStatusFunc, recovered by the caller as
// net/http does) gives up the record's lease: not renewed for the life of the process, the
// record can be finished at once by the next Do, which asks first and sends nothing more.
func TestPanicInCallReleasesTheLease(t *testing.T) {
	var dropped atomic.Bool
	a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, _ int64) {
		if dropped.CompareAndSwap(false, true) { // charge, then lose the answer
			a.charge(httptest.NewRecorder(), key, ref)
			panic(http.ErrAbortHandler)
		}
		a.charge(w, key, ref)
	})
	var panicked atomic.Bool
	var c *Client
	c, _ = ledgerClient(t, a, func(cfg *Config) {
		cfg.KeyStatusFunc = func(ctx context.Context, req outcome.KeyStatusRequest) (outcome.KeyStatus, error) {
			if panicked.CompareAndSwap(false, true) {
				panic("status function bug")
			}
			return c.defaultStatus(statusPath)(ctx, req)
		}
	})
	op := payment(1, "order-p", WithIntent("order-p"))
	func() {
		defer func() { require.Equal(t, "status function bug", recover()) }()
		_, _ = c.Do(context.Background(), op)
	}()
	rec, err := c.store.GetByIntent(context.Background(), "", "order-p")
	require.NoError(t, err)
	assert.Equal(t, keystore.StatePending, rec.State)
	assert.Empty(t, rec.Owner, "the lease is released")
	c.renewer.mu.Lock()
	assert.Empty(t, c.renewer.calls, "nothing left to renew")
	c.renewer.mu.Unlock()
	res, err := c.Do(context.Background(), op)
	require.NoError(t, err)
	assert.Equal(t, outcome.SourceKeyStatus, res.Source)
	assert.Equal(t, 1, a.charges("order-p"))
	assert.EqualValues(t, 1, a.posts.Load())
}

// A status answer carries the stored response whole: one over the old 4 MiB bound, with a
// body the API could have sent itself (under the call's MaxResponseSize, which may exceed
// the client's), even escaped in a JSON string at six bytes a byte, is read, not cut into an
// outcome unknown that no later call could settle.
func TestStatusAnswerWithALargeBody(t *testing.T) {
	for _, tc := range []struct {
		name           string
		body           string
		client, call   int64 // MaxResponseSize; 0: the default
		wantBodyLength int
	}{
		{"5 MiB under the default bound", strings.Repeat("x", 5<<20), 0, 0, 5<<20 + 2},
		{"7 MiB under the call's bound", strings.Repeat("x", 7<<20), 1 << 20, 64 << 20, 7<<20 + 2},
		{"1 MiB escaped sixfold", strings.Repeat("<", 1<<20), 1 << 20, 0, 6<<20 + 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stored, _ := json.Marshal(tc.body) // "<" becomes \u003c, as encoding/json writes it
			var posts atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					posts.Add(1)
					panic(http.ErrAbortHandler) // charged, the answer lost
				}
				fmt.Fprintf(w, `{"status":"completed","response_status":201,"response_body":%s}`, stored)
			}))
			defer srv.Close()
			clk := newFakeClock()
			c, err := NewClient(Config{BaseURL: srv.URL, KeyStatusURL: statusPath, Store: keystore.NewMemory(), Now: clk.Now, Sleep: clk.Sleep,
				Policy: Policy{MaxResponseSize: tc.client}})
			require.NoError(t, err)
			defer c.Close()
			var opts []CallOption
			if tc.call > 0 {
				opts = append(opts, CallPolicy(Policy{MaxResponseSize: tc.call}))
			}
			res, err := c.Do(context.Background(), payment(1, "order-big"), opts...)
			require.NoError(t, err)
			assert.Equal(t, outcome.SourceKeyStatus, res.Source)
			assert.Len(t, res.Body, tc.wantBodyLength)
			assert.EqualValues(t, 1, posts.Load())
		})
	}
}

// A handle that panics runs on Recover's workers: the panic comes back on the caller's
// goroutine, where it can be recovered, after every other record was reconciled and handed
// over; it does not end the process.
func TestRecoverHandlePanicReachesTheCaller(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, nil)
	ctx := context.Background()
	for i, k := range []string{"k-1", "k-2", "k-3", "k-4"} {
		require.NoError(t, e.store.Create(ctx, newPendingRecord(k, 100+i, "ref-"+k, e.clock.Now())))
	}
	var handled atomic.Int32
	func() {
		defer func() { assert.Equal(t, "handler bug", recover()) }()
		_, _ = e.c.Recover(ctx, func(Reconciled) {
			if handled.Add(1) == 2 {
				panic("handler bug")
			}
		})
		t.Fatal("Recover returned without raising the handler's panic")
	}()
	assert.EqualValues(t, 4, handled.Load())
	for _, k := range []string{"k-1", "k-2", "k-3", "k-4"} {
		assert.Equal(t, keystore.StateSucceeded, e.record(k).State, k)
		assert.Equal(t, 1, e.srv.ExecutionsByReference("ref-"+k), k)
	}
}

// panicStore panics in its next Create (after committing) or Get, as a buggy store wrapper
// would.
type panicStore struct {
	*keystore.Memory
	createPanics, getPanics atomic.Bool
}

func (s *panicStore) Create(ctx context.Context, r *keystore.Record) error {
	err := s.Memory.Create(ctx, r)
	if s.createPanics.CompareAndSwap(true, false) {
		panic("store bug in Create")
	}
	return err
}

func (s *panicStore) Get(ctx context.Context, scope, key string) (*keystore.Record, error) {
	if s.getPanics.CompareAndSwap(true, false) {
		panic("store bug in Get")
	}
	return s.Memory.Get(ctx, scope, key)
}

// A store that panics while Do holds the key's lock (here in Create, after committing):
// the lock is released as the panic unwinds, and the next Do of the key finishes it (the
// record found pending, asked about first) instead of waiting forever.
func TestStorePanicReleasesTheKeyLock(t *testing.T) {
	a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, _ int64) { a.charge(w, key, ref) })
	store := &panicStore{Memory: keystore.NewMemory()}
	store.createPanics.Store(true)
	c, _ := ledgerClient(t, a, func(cfg *Config) { cfg.Store = store })
	op := payment(1, "order-sp")
	func() {
		defer func() { assert.Equal(t, "store bug in Create", recover()) }()
		_, _ = c.Do(context.Background(), op)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := c.Do(ctx, op)
	require.NoError(t, err, "the key's lock was left held")
	assert.Equal(t, http.StatusCreated, res.StatusCode)
	assert.Equal(t, 1, a.charges("order-sp"))
}

// The application's code panicking on one of Recover's workers (here the store, in the
// reclaim pass and in the listing) reaches the caller after the run, not the process's end;
// the other records are reconciled.
func TestRecoverWorkerPanicReachesTheCaller(t *testing.T) {
	a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, _ int64) { a.charge(w, key, ref) })
	var c *Client
	var panicked atomic.Bool
	c, clk := ledgerClient(t, a, func(cfg *Config) {
		cfg.KeyStatusFunc = func(ctx context.Context, req outcome.KeyStatusRequest) (outcome.KeyStatus, error) {
			if panicked.CompareAndSwap(false, true) {
				panic("status function bug")
			}
			return c.defaultStatus(statusPath)(ctx, req)
		}
	})
	ctx := context.Background()
	for i, k := range []string{"k-1", "k-2", "k-3"} {
		require.NoError(t, c.store.Create(ctx, newPendingRecord(k, 100+i, "ref-"+k, clk.Now())))
	}
	func() {
		defer func() { assert.Equal(t, "status function bug", recover()) }()
		_, _ = c.Recover(ctx, nil)
		t.Fatal("Recover returned without raising the worker's panic")
	}()
	sent := 0
	for _, k := range []string{"k-1", "k-2", "k-3"} {
		sent += a.charges("ref-" + k)
	}
	assert.Equal(t, 2, sent, "the two other records were reconciled")
	_, err := c.Recover(ctx, nil) // the one whose call panicked is finished by the next run
	require.NoError(t, err)
	for _, k := range []string{"k-1", "k-2", "k-3"} {
		assert.Equal(t, 1, a.charges("ref-"+k), k)
	}
}

// A status check's "not found" after an unknown outcome does not prove that request will
// never arrive (queued in a load balancer): a WAF's 403 to the resend is no answer for the
// payment, which stays pending (ErrOutcomeUnknown), never a failure after which the
// application would pay again while the first request lands.
func TestRefusalAfterNotFoundIsUnknown(t *testing.T) {
	// 403: a WAF. 422: a duplicate-reference check that ran before the key's, against a
	// replica the first request had not reached yet.
	for _, code := range []int{http.StatusForbidden, http.StatusUnprocessableEntity} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, n int64) {
				switch n {
				case 1: // queued somewhere: the client times out, the server has not seen the key
					panic(http.ErrAbortHandler)
				case 2:
					w.WriteHeader(code)
				default:
					a.charge(w, key, ref)
				}
			})
			c, _ := ledgerClient(t, a, nil)
			op := payment(1, "order-w", WithIntent("order-w"))
			_, err := c.Do(context.Background(), op)
			require.ErrorIs(t, err, ErrOutcomeUnknown)
			require.NotErrorIs(t, err, ErrPermanent)
			rec, gerr := c.store.GetByIntent(context.Background(), "", "order-w")
			require.NoError(t, gerr)
			assert.Equal(t, keystore.StatePending, rec.State)
			res, err := c.Do(context.Background(), op) // the same intent again: asked, then sent once
			require.NoError(t, err)
			assert.Equal(t, http.StatusCreated, res.StatusCode)
			assert.Equal(t, 1, a.charges("order-w"))
		})
	}
}

// A record a reclaim pass claimed waits in its queue while a Do of this process (same
// owner) takes the key and finishes it: the worker, getting the key lock afterwards, does
// nothing with its stale copy (it re-reads the record under its claim): no status check, no
// send, whatever the copy said.
func TestReclaimWorkerSkipsARecordDoFinished(t *testing.T) {
	hold := make(chan struct{})
	a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, n int64) { a.charge(w, key, ref) })
	var c *Client
	var asksR atomic.Int32
	c, clk := ledgerClient(t, a, func(cfg *Config) {
		cfg.RecoverConcurrency, cfg.PurgeInterval = 1, -1
		cfg.KeyStatusFunc = func(ctx context.Context, req outcome.KeyStatusRequest) (outcome.KeyStatus, error) {
			switch req.Key {
			case "k-b0":
				<-hold // the one worker is busy with k-b0; k-r waits in the queue
			case "k-r":
				asksR.Add(1)
			}
			return c.defaultStatus(statusPath)(ctx, req)
		}
	})
	ctx := context.Background()
	b0 := newPendingRecord("k-b0", 100, "ref-b0", clk.Now())
	r := newPendingRecord("k-r", 200, "ref-r", clk.Now().Add(time.Millisecond))
	r.Intent = "order-r"
	require.NoError(t, c.store.Create(ctx, b0))
	require.NoError(t, c.store.Create(ctx, r))
	done := make(chan struct{})
	go func() { defer close(done); _, _ = c.Recover(ctx, nil) }()
	require.Eventually(t, func() bool {
		got, _ := c.store.Get(ctx, "", "k-r")
		return got.Owner == c.Owner()
	}, 5*time.Second, time.Millisecond, "the pass claims k-r")
	res, err := c.Do(ctx, NewOperation(http.MethodPost, "/v1/payments", paymentBody(200, "ref-r"), WithIntent("order-r"), WithKey("k-r")))
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, res.StatusCode)
	close(hold)
	<-done
	got, err := c.store.Get(ctx, "", "k-r")
	require.NoError(t, err)
	assert.Equal(t, keystore.StateSucceeded, got.State)
	assert.Equal(t, 1, a.charges("ref-r"))
	assert.Equal(t, 1, a.charges("ref-b0"))
	assert.EqualValues(t, 2, a.posts.Load(), "k-r sent once, by Do; k-b0 once")
	assert.EqualValues(t, 1, asksR.Load(), "k-r asked about by Do only")
}

// purgePanicStore's PurgeBatch panics, as a buggy store wrapper would.
type purgePanicStore struct{ *keystore.Memory }

func (purgePanicStore) PurgeBatch(context.Context, time.Time, keystore.Cursor, int) (int, keystore.Cursor, error) {
	panic("store bug in PurgeBatch")
}

// The background purge runs on a goroutine of the client's own, where no caller waits: a
// panic of the application's code there is logged, and the process goes on.
func TestBackgroundPurgePanicIsLogged(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, _ int64) { a.charge(w, key, ref) })
	c, clk := ledgerClient(t, a, func(cfg *Config) {
		cfg.Store = purgePanicStore{keystore.NewMemory()}
		cfg.PurgeInterval = time.Minute
		cfg.Logger = slog.New(slog.NewTextHandler(lockedWriter{&buf, &mu}, nil))
	})
	clk.Advance(2 * time.Minute) // a pass is due at the next Do
	_, err := c.Do(context.Background(), payment(1, "order-bp"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(buf.String(), "store bug in PurgeBatch")
	}, 5*time.Second, time.Millisecond)
}

// pageStore is Memory whose ListPage panics, as a buggy Pager would.
type pageStore struct{ *keystore.Memory }

func (pageStore) ListPage(context.Context, []keystore.State, keystore.Cursor, int) (keystore.Page, error) {
	panic("store bug in ListPage")
}

// A panic on Recover's own goroutine (here in the store's ListPage) reaches the caller only
// once Recover's workers have ended: none is left to send after the caller moved on.
func TestRecoverPanicEndsItsWorkers(t *testing.T) {
	a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, _ int64) { a.charge(w, key, ref) })
	c, _ := ledgerClient(t, a, func(cfg *Config) {
		cfg.Store, cfg.RecoverConcurrency, cfg.PurgeInterval = pageStore{keystore.NewMemory()}, 8, -1
	})
	func() {
		defer func() { assert.Equal(t, "store bug in ListPage", recover()) }()
		_, _ = c.Recover(context.Background(), nil)
	}()
	// Recover's own goroutines, by their stacks: a count of every goroutine in the process
	// also saw other tests' connections and timers come and go. A worker that has run its
	// wg.Done may still be on the stack for a moment while the goroutine unwinds (a clean-clone
	// CI run caught one "runnable" at the loop's end), so the check waits briefly; a worker
	// left blocked on its channel, the bug this guards against, never goes.
	assert.Eventually(t, func() bool {
		buf := make([]byte, 1<<20)
		return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "idem.(*Client).Recover")
	}, 2*time.Second, time.Millisecond, "Recover's workers outlived it")
}

// queuedAPI is a payments API whose first POST is queued in front of it (the client gets a
// reset, the server has not seen the key; land delivers it later), and whose every resend of
// that key meets a WAF's 403. A new key charges.
func queuedAPI(t *testing.T) (a *ledgerAPI, land func()) {
	var mu sync.Mutex
	var firstKey, firstRef string
	a = newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, n int64) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case n == 1:
			firstKey, firstRef = key, ref
			panic(http.ErrAbortHandler)
		case key == firstKey:
			w.WriteHeader(http.StatusForbidden)
		default:
			a.charge(w, key, ref)
		}
	})
	return a, func() {
		mu.Lock()
		defer mu.Unlock()
		a.charge(httptest.NewRecorder(), firstKey, firstRef)
	}
}

// The 403 stays no answer across calls: a second Do of the same operation moments later
// (asked first: still "not found"), or one resuming a record the first call left pending
// after its attempts ran out, never reads it as a failure while the first request may
// still land. Told "failed", the application would pay again as it lands.
func TestRefusalAfterNotFoundAcrossCalls(t *testing.T) {
	for _, name := range []string{"Do again", "Do again after attempts ran out"} {
		t.Run(name, func(t *testing.T) {
			a, land := queuedAPI(t)
			c, _ := ledgerClient(t, a, nil)
			op := payment(1, "order-q")
			var opts []CallOption
			if name != "Do again" {
				opts = append(opts, CallMaxAttempts(1))
			}
			_, err := c.Do(context.Background(), op, opts...)
			require.Error(t, err)
			require.NotErrorIs(t, err, ErrPermanent)
			_, err = c.Do(context.Background(), op)
			require.ErrorIs(t, err, ErrOutcomeUnknown)
			require.NotErrorIs(t, err, ErrPermanent)
			land()
			res, err := c.Do(context.Background(), op) // asked: completed
			require.NoError(t, err)
			assert.Equal(t, outcome.SourceKeyStatus, res.Source)
			assert.Equal(t, 1, a.charges("order-q"))
		})
	}
}

// A re-read that fails in a reclaim pass holds the claimed record, released when the pass
// ends, so another instance (or the next Recover) need not wait out its lease.
func TestReclaimReReadErrorReleasesTheClaim(t *testing.T) {
	a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, n int64) { a.charge(w, key, ref) })
	store := &slowStore{Memory: keystore.NewMemory()}
	c, clk := ledgerClient(t, a, func(cfg *Config) { cfg.Store, cfg.PurgeInterval = store, -1 })
	ctx := context.Background()
	r := newPendingRecord("k-x", 100, "ref-x", clk.Now())
	r.Attempts = 1
	require.NoError(t, store.Create(ctx, r))
	store.failGetOnce.Store(true)
	_, err := c.Recover(ctx, nil)
	require.NoError(t, err)
	got, err := store.Memory.Get(ctx, "", "k-x")
	require.NoError(t, err)
	assert.Equal(t, keystore.StatePending, got.State)
	assert.Empty(t, got.Owner, "released when the pass ended")
	_, err = c.Recover(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, a.charges("ref-x"))
}

// A process that crashed during its first attempt leaves the record pending with no attempt
// counted, while that request may sit queued in front of the API. Resumed (Recover, or a Do
// of the intent elsewhere), a "not found" then a WAF's 403 to the resend is no answer: the
// record stays pending, and once the queued request lands the next run learns it.
func TestResumedRecordRefusalAfterNotFoundIsUnknown(t *testing.T) {
	a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, n int64) {
		w.WriteHeader(http.StatusForbidden) // every resend meets the WAF
	})
	c, clk := ledgerClient(t, a, nil)
	ctx := context.Background()
	rec := newPendingRecord("k-crash", 100, "order-crash", clk.Now()) // Attempts 0, not "not executed"
	require.NoError(t, c.store.Create(ctx, rec))
	var got []error
	_, err := c.Recover(ctx, func(r Reconciled) { got = append(got, r.Err) })
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.ErrorIs(t, got[0], ErrOutcomeUnknown)
	assert.NotErrorIs(t, got[0], ErrPermanent)
	after, err := c.store.Get(ctx, "", "k-crash")
	require.NoError(t, err)
	assert.Equal(t, keystore.StatePending, after.State)
	assert.False(t, after.NotExecuted, "the next run asks first")
	a.charge(httptest.NewRecorder(), "k-crash", "order-crash") // the queued request lands
	_, err = c.Recover(ctx, nil)
	require.NoError(t, err)
	after, err = c.store.Get(ctx, "", "k-crash")
	require.NoError(t, err)
	assert.Equal(t, keystore.StateSucceeded, after.State)
	assert.Equal(t, 1, a.charges("order-crash"))
}
