package idem

import (
	"context"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/event"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
	"github.com/idemkit/idem/outcome"
)

// countingStore counts the calls a client makes on its keystore, and what had happened when
// the first request byte reached the server (snapshot).
type countingStore struct {
	keystore.Store
	mu    sync.Mutex
	calls map[string]int
}

func (s *countingStore) count(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls == nil {
		s.calls = map[string]int{}
	}
	s.calls[name]++
}

func (s *countingStore) snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.calls {
		out[k] = v
	}
	return out
}

func (s *countingStore) Create(ctx context.Context, rec *keystore.Record) error {
	s.count("Create")
	return s.Store.Create(ctx, rec)
}

func (s *countingStore) Update(ctx context.Context, rec *keystore.Record) error {
	s.count("Update")
	return s.Store.Update(ctx, rec)
}

func (s *countingStore) UpdateDeferred(ctx context.Context, rec *keystore.Record) error {
	s.count("UpdateDeferred")
	return s.Store.(keystore.DeferredUpdater).UpdateDeferred(ctx, rec)
}

func (s *countingStore) Claim(ctx context.Context, scope, key string, l keystore.Lease) (*keystore.Record, error) {
	s.count("Claim")
	return s.Store.Claim(ctx, scope, key, l)
}

func (s *countingStore) Renew(ctx context.Context, scope, key, owner string, fence int64, until time.Time) error {
	s.count("Renew")
	return s.Store.Renew(ctx, scope, key, owner, fence, until)
}

func (s *countingStore) Release(ctx context.Context, scope, key, owner string, fence int64) error {
	s.count("Release")
	return s.Store.Release(ctx, scope, key, owner, fence)
}

func (s *countingStore) ClaimExpired(ctx context.Context, l keystore.Lease, limit int) ([]*keystore.Record, error) {
	s.count("ClaimExpired")
	return s.Store.ClaimExpired(ctx, l, limit)
}

func openBolt(t *testing.T) *boltstore.Store {
	t.Helper()
	s, err := boltstore.Open(filepath.Join(t.TempDir(), "keys.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestOneSyncWriteBeforeFirstByte: the record is created already claimed, so the happy path
// still makes exactly one synchronous write before the first byte (the Create), and after
// it only the deferred final write: no Claim, Renew or Release.
func TestOneSyncWriteBeforeFirstByte(t *testing.T) {
	store := &countingStore{Store: openBolt(t)}
	var atArrival map[string]int
	e := newEnv(t, idemtest.Config{OnPayment: func(*http.Request) { atArrival = store.snapshot() }}, func(c *Config) {
		c.Store = store
		c.Fleet.Owner = "instance-1"
	})
	op := payment(100, "ref-1")
	res, err := e.c.Do(context.Background(), op)
	require.NoError(t, err)
	assert.Equal(t, outcome.SourceResponse, res.Source)
	assert.Equal(t, map[string]int{"Create": 1}, atArrival, "one durable write before the first byte")
	assert.Equal(t, map[string]int{"Create": 1, "UpdateDeferred": 1}, store.snapshot())
	rec, err := store.Get(context.Background(), "", op.Key())
	require.NoError(t, err)
	assert.Equal(t, keystore.StateSucceeded, rec.State)
	assert.Equal(t, "instance-1", rec.Owner)
	assert.Equal(t, int64(1), rec.Fence)
	assert.Equal(t, e.clock.Now().Add(defaultLeaseTTL), rec.LeaseUntil)
}

// TestLeaseConfig: LeaseTTL must be longer than the attempt timeout; Owner defaults to a
// per-Client id.
func TestLeaseConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{}, true},
		{"equal to the attempt timeout", Config{Fleet: FleetConfig{LeaseTTL: defaultAttemptTimeout}}, false},
		{"shorter than a custom attempt timeout", Config{Fleet: FleetConfig{LeaseTTL: time.Second}, Policy: Policy{AttemptTimeout: 2 * time.Second}}, false},
		{"longer than a custom attempt timeout", Config{Fleet: FleetConfig{LeaseTTL: 3 * time.Second}, Policy: Policy{AttemptTimeout: 2 * time.Second}}, true},
		{"negative", Config{Fleet: FleetConfig{LeaseTTL: -time.Second}}, false},
		{"negative reclaim interval", Config{Fleet: FleetConfig{ReclaimInterval: -time.Second}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.BaseURL = "http://127.0.0.1:1"
			_, err := NewClient(tc.cfg)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidConfig)
		})
	}
	c1, err := NewClient(Config{})
	require.NoError(t, err)
	c2, err := NewClient(Config{})
	require.NoError(t, err)
	assert.NotEqual(t, c1.Owner(), c2.Owner())
	assert.NotEmpty(t, c1.Owner())
	_, err = NewClient(Config{Fleet: FleetConfig{LeaseTTL: time.Second}})
	assert.ErrorContains(t, err, "LeaseTTL")
}

// TestDoWaitsForDeadOwnersLease: a pending record whose owner stopped renewing: Do waits
// (injected clock) until the lease expires, claims the record with the next fence and
// continues the same key: the status endpoint first, then one send.
func TestDoWaitsForDeadOwnersLease(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, func(c *Config) { c.Fleet.Owner = "instance-2" })
	ctx := context.Background()
	op := payment(100, "ref-9", WithIntent("order-9"))
	created := e.clock.Now()
	require.NoError(t, e.store.Create(ctx, &keystore.Record{Key: op.Key(), Intent: "order-9",
		Fingerprint: Fingerprint(op.method, op.url, op.body), State: keystore.StatePending,
		Request:   keystore.Request{Method: op.method, URL: op.url, Header: op.header, Body: op.body},
		CreatedAt: created, UpdatedAt: created, Owner: "instance-1", LeaseUntil: created.Add(5 * time.Second), Fence: 1}))
	res, err := e.c.Do(ctx, payment(100, "ref-9", WithIntent("order-9")))
	require.NoError(t, err)
	assert.Equal(t, op.Key(), res.Key, "the intent's key, not a new one")
	assert.Equal(t, 1, e.srv.AttemptsFor(op.Key()))
	assert.Equal(t, 1, e.srv.ExecutionsFor(op.Key()))
	assert.Equal(t, int64(1), e.c.Stats().LeaseWaits)
	assert.Equal(t, int64(1), e.c.Stats().OrphansReclaimed, "taken over from a dead owner")
	var waited time.Duration
	for _, d := range e.clock.Sleeps() {
		waited += d
	}
	assert.Equal(t, 5*time.Second, waited, "waited exactly until the lease expired")
	rec := e.record(op.Key())
	assert.Equal(t, keystore.StateSucceeded, rec.State)
	assert.Equal(t, "instance-2", rec.Owner)
	assert.Equal(t, int64(2), rec.Fence)
}

// TestDoWaitBoundedByContext: while another instance's lease is live, a Do whose context
// ends returns ErrCanceled with the outcome unknown and sends nothing.
func TestDoWaitBoundedByContext(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	op := payment(100, "ref-10")
	now := e.clock.Now()
	require.NoError(t, e.store.Create(ctx, &keystore.Record{Key: op.Key(), Fingerprint: Fingerprint(op.method, op.url, op.body),
		State: keystore.StatePending, Request: keystore.Request{Method: op.method, URL: op.url, Body: op.body},
		CreatedAt: now, UpdatedAt: now, Owner: "other", LeaseUntil: now.Add(time.Hour), Fence: 1}))
	e.c.cfg.Sleep = func(ctx context.Context, d time.Duration) error { cancel(); return ctx.Err() }
	_, err := e.c.Do(ctx, op)
	require.ErrorIs(t, err, ErrCanceled)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 0, e.srv.Stats().Requests)
	assert.Equal(t, "other", e.record(op.Key()).Owner)
}

// TestExclusiveStoreTakesDeadProcessLease: the bbolt file is held by one process, so a live
// lease left by an ended process (an owner no Client here has) is taken at once by Do after
// a restart, without waiting for it to expire.
func TestExclusiveStoreTakesDeadProcessLease(t *testing.T) {
	store := openBolt(t)
	e := newEnv(t, idemtest.Config{}, func(c *Config) { c.Store = store })
	ctx := context.Background()
	op := payment(100, "ref-11")
	now := e.clock.Now()
	require.NoError(t, store.Create(ctx, &keystore.Record{Key: op.Key(), Fingerprint: Fingerprint(op.method, op.url, op.body),
		State: keystore.StatePending, Request: keystore.Request{Method: op.method, URL: op.url, Body: op.body},
		CreatedAt: now, UpdatedAt: now, Owner: "previous-process", LeaseUntil: now.Add(time.Hour), Fence: 1}))
	_, err := e.c.Do(ctx, op)
	require.NoError(t, err)
	assert.Empty(t, e.clock.Sleeps(), "no wait for a lease of an ended process")
	assert.Equal(t, int64(0), e.c.Stats().LeaseWaits)
	assert.Equal(t, int64(1), e.c.Stats().OrphansReclaimed)
	assert.Equal(t, 1, e.srv.AttemptsFor(op.Key()))
	rec, err := store.Get(ctx, "", op.Key())
	require.NoError(t, err)
	assert.Equal(t, keystore.StateSucceeded, rec.State)
	assert.Equal(t, int64(2), rec.Fence)
}

// TestPendingEndReleasesLease: a call that ends with the record pending (retries
// exhausted) releases its lease, so another instance may reclaim it at once.
func TestPendingEndHoldsTheLeaseForTheBackoff(t *testing.T) {
	store := &countingStore{Store: openBolt(t)}
	e := newEnv(t, idemtest.Config{RetryAfter: -1}, func(c *Config) {
		c.Store = store
		c.Policy.MaxAttempts = 2
	})
	e.srv.Script(idemtest.Fault503, idemtest.Fault503)
	op := payment(100, "ref-12")
	_, err := e.c.Do(context.Background(), op)
	require.ErrorIs(t, err, ErrExhausted)
	rec, err := store.Get(context.Background(), "", op.Key())
	require.NoError(t, err)
	assert.Equal(t, keystore.StatePending, rec.State)
	// Kept for the policy's backoff after two attempts (100 ms, then 200 ms), not released:
	// another instance's reclaimer must not resend it at once.
	assert.Equal(t, e.c.cfg.Fleet.Owner, rec.Owner, "held")
	assert.True(t, e.clock.Now().Add(2*defaultInitialDelay).Equal(rec.LeaseUntil), "lease until %s", rec.LeaseUntil)
	assert.Equal(t, int64(1), rec.Fence)
	assert.True(t, rec.NotExecuted, "the deferred final write was committed before the hold")
	assert.Equal(t, 2, rec.Attempts)
	calls := store.snapshot()
	assert.Equal(t, 2, calls["Renew"], "one renewal before the resend, one for the hold")
	assert.Equal(t, 0, calls["Release"])

	// The caller canceled: released at once, another instance may go on.
	e.srv.Script(idemtest.Fault503)
	ctx, cancel := context.WithCancel(context.Background())
	e.c.cfg.Hooks.OnRetry = func(event.Retry) { cancel() }
	op2 := payment(101, "ref-13")
	_, err = e.c.Do(ctx, op2)
	require.ErrorIs(t, err, ErrCanceled)
	rec, err = store.Get(context.Background(), "", op2.Key())
	require.NoError(t, err)
	assert.Equal(t, "", rec.Owner, "released")
	assert.True(t, rec.LeaseUntil.IsZero())
}

// TestReclaimer: with ReclaimInterval set, a running client takes over a dead instance's
// records without Recover being called; Close stops it.
func TestReclaimer(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, func(c *Config) { c.Fleet.ReclaimInterval = 5 * time.Millisecond })
	ctx := context.Background()
	created := e.clock.Now().Add(-time.Minute)
	var keys []string
	for i := range 5 {
		op := payment(100+i, "orphan")
		keys = append(keys, op.key)
		require.NoError(t, e.store.Create(ctx, &keystore.Record{Key: op.key, Fingerprint: Fingerprint(op.method, op.url, op.body),
			State: keystore.StatePending, Request: keystore.Request{Method: op.method, URL: op.url, Body: op.body},
			CreatedAt: created, UpdatedAt: created, Owner: "dead", LeaseUntil: created.Add(time.Second), Fence: 1}))
	}
	require.Eventually(t, func() bool {
		recs, err := e.store.List(ctx, keystore.StatePending)
		return err == nil && len(recs) == 0
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, e.c.Close())
	assert.Equal(t, int64(5), e.c.Stats().OrphansReclaimed)
	for _, k := range keys {
		assert.Equal(t, 1, e.srv.AttemptsFor(k))
		assert.Equal(t, keystore.StateSucceeded, e.record(k).State)
	}
	// Close waited for the background goroutine to end.
	select {
	case <-e.c.reclaimer.done:
	default:
		t.Fatal("the reclaimer goroutine still runs after Close")
	}
}

// renewSignal is a countingStore that also signals each Renew on renewed.
type renewSignal struct {
	countingStore
	renewed chan error
}

func (s *renewSignal) Renew(ctx context.Context, scope, key, owner string, fence int64, until time.Time) error {
	err := s.countingStore.Renew(ctx, scope, key, owner, fence, until)
	select {
	case s.renewed <- err:
	default:
	}
	return err
}

// TestBackgroundRenewal: a call that outlives its renewal interval has its lease renewed by
// the client's renewer while the attempt is in flight (the server answers only after the
// renewal), and a call that ends first is never renewed. The renewal interval (LeaseTTL/3)
// is shortened so the test does not wait.
func TestBackgroundRenewal(t *testing.T) {
	store := &renewSignal{countingStore: countingStore{Store: openBolt(t)}, renewed: make(chan error, 1)}
	block := true
	e := newEnv(t, idemtest.Config{OnPayment: func(*http.Request) {
		if !block {
			return
		}
		select {
		case err := <-store.renewed:
			assert.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("no renewal while the attempt was in flight")
		}
	}}, func(c *Config) { c.Store = store })
	e.c.renewer.every = time.Millisecond
	op := payment(100, "ref-renew")
	res, err := e.c.Do(context.Background(), op)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Attempts)
	rec, err := store.Get(context.Background(), "", op.Key())
	require.NoError(t, err)
	assert.Equal(t, keystore.StateSucceeded, rec.State)
	assert.Equal(t, int64(1), rec.Fence, "a renewal keeps the fence")
	renews := store.snapshot()["Renew"]
	assert.GreaterOrEqual(t, renews, 1)

	// A quick call is not renewed: its lease ends before a renewal is due.
	block = false
	e.c.renewer.mu.Lock()
	e.c.renewer.every = time.Hour
	e.c.renewer.mu.Unlock()
	_, err = e.c.Do(context.Background(), payment(101, "ref-quick"))
	require.NoError(t, err)
	e.c.renewer.mu.Lock()
	assert.Empty(t, e.c.renewer.calls, "ended calls leave the renewer")
	e.c.renewer.mu.Unlock()
	assert.LessOrEqual(t, store.snapshot()["Renew"]-renews, 1, "at most a renewal of the first call still due")
}

// TestBackgroundRenewalFenced: another instance takes the record over while an attempt is
// in flight; the renewer's fenced renewal cancels the attempt at once (Do returns while the
// server still holds the request), and the call returns ErrLeaseLost without writing over
// the new owner's record.
func TestBackgroundRenewalFenced(t *testing.T) {
	store := openBolt(t)
	var e *env
	var op *Operation
	lost, returned := make(chan struct{}), make(chan struct{})
	e = newEnv(t, idemtest.Config{OnPayment: func(r *http.Request) {
		far := e.clock.Now().Add(time.Hour)
		_, err := store.Claim(context.Background(), "", op.Key(), keystore.Lease{Owner: "other", Now: far, Until: far.Add(time.Minute)})
		assert.NoError(t, err)
		for _, ch := range []chan struct{}{lost, returned} {
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
				t.Error("the attempt was not cancelled after the lease was lost")
				return
			}
		}
	}}, func(c *Config) {
		c.Store = store
		c.Hooks.OnClaimLost = func(event.ClaimLost) { close(lost) }
	})
	e.c.renewer.every = time.Millisecond
	op = payment(100, "ref-fenced")
	_, err := e.c.Do(context.Background(), op)
	close(returned)
	require.ErrorIs(t, err, ErrLeaseLost)
	var oe *OperationError
	require.ErrorAs(t, err, &oe)
	assert.True(t, oe.Unknown, "the request may have executed")
	assert.Equal(t, int64(1), e.c.Stats().ClaimsLost)
	rec, err := store.Get(context.Background(), "", op.Key())
	require.NoError(t, err)
	assert.Equal(t, keystore.StatePending, rec.State)
	assert.Equal(t, "other", rec.Owner)
	assert.Equal(t, int64(2), rec.Fence)
}
