// Package fleettest holds the fleet scenarios of the client (several instances, each a
// Client with its own owner id, on one keystore), run by the root package against Memory and
// the bbolt store and by keystore/pgstore against PostgreSQL. Each scenario asserts on the
// server's side (idemtest's attempt and execution counts) that no key is sent twice.
package fleettest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/event"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/wait"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

// Stores returns the keystores of two instances: one shared store twice (Memory, bbolt) or
// two handles on one database (pgstore).
type Stores func(t *testing.T) (a, b keystore.Store)

// Clock is the injected clock the instances share. Its Sleep waits one real millisecond and
// does not move Now, so that a waiting instance polls while the owner's lease stays live:
// only Advance moves time. It starts at the real time, so that the clients' check against a
// store's clock (keystore.Clock, Config.Fleet.MaxClockSkew) passes until a scenario advances it.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	follow time.Time // FollowingClock: real time since then is added to now
}

// NewClock starts at the current real time, to the second.
func NewClock() *Clock { return &Clock{now: time.Now().Truncate(time.Second)} }

// FollowingClock is a Clock that also moves with real time, for a scenario that must stay
// within Config.Fleet.MaxClockSkew of a store's clock however long it runs (a loaded machine),
// and in which no lease must stay live longer than real time allows.
func FollowingClock() *Clock {
	now := time.Now()
	return &Clock{now: now, follow: now}
}

// Now returns the current instant.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.follow.IsZero() {
		return c.now.Add(time.Since(c.follow))
	}
	return c.now
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Sleep waits a millisecond of real time, or until ctx ends.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	return wait.Sleep(ctx, time.Millisecond)
}

// Instance builds a Client named owner on store against srv with clock.
func Instance(t *testing.T, srv *idemtest.Server, store keystore.Store, clock *Clock, owner string, mod func(*idem.Config)) *idem.Client {
	t.Helper()
	cfg := idem.Config{BaseURL: srv.URL, Store: store, KeyStatusURL: idemtest.KeyStatusPathPattern,
		Fleet: idem.FleetConfig{Owner: owner, LeaseTTL: 30 * time.Second}, Now: clock.Now, Sleep: clock.Sleep,
		Budget: idem.BudgetConfig{Disabled: true}, PurgeInterval: -1}
	if mod != nil {
		mod(&cfg)
	}
	c, err := idem.NewClient(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func payment(ref string, opts ...idem.OperationOption) *idem.Operation {
	body, _ := json.Marshal(map[string]any{"amount": 1250, "currency": "EUR", "customer": "cus_1", "reference": ref})
	return idem.NewOperation(http.MethodPost, idemtest.PaymentsPath, body, opts...)
}

// SameIntentAtOnce: two instances Do the same intent at the same moment. One creates the
// record (claimed); the other finds it, waits for the live lease, and returns the stored
// outcome. One key, one request, one execution; both get the same answer.
func SameIntentAtOnce(t *testing.T, stores Stores) {
	sa, sb := stores(t)
	clock := NewClock()
	var a, b *idem.Client
	var first atomic.Bool
	srv := idemtest.NewServer(idemtest.Config{Now: clock.Now, OnPayment: func(*http.Request) {
		if !first.CompareAndSwap(false, true) {
			return
		}
		// Hold the first request until the other instance is waiting for the lease.
		deadline := time.Now().Add(10 * time.Second)
		for a.Stats().LeaseWaits+b.Stats().LeaseWaits == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}})
	t.Cleanup(srv.Close)
	a = Instance(t, srv, sa, clock, "instance-a", nil)
	b = Instance(t, srv, sb, clock, "instance-b", nil)

	ctx := context.Background()
	ops := []*idem.Operation{payment("order-42", idem.WithIntent("order-42")), payment("order-42", idem.WithIntent("order-42"))}
	results := make([]*idem.Result, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, c := range []*idem.Client{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = c.Do(ctx, ops[i])
		}()
	}
	close(start)
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	assert.Equal(t, results[0].Key, results[1].Key, "one key fleet-wide for the intent")
	assert.Equal(t, results[0].Body, results[1].Body, "both instances return the same payment")
	assert.Equal(t, 1, srv.AttemptsFor(results[0].Key), "one request for the key")
	assert.Equal(t, 1, srv.Stats().Requests, "no request under the other instance's key")
	assert.Equal(t, 1, srv.ExecutionsByReference("order-42"), "charged once")
	waits := a.Stats().LeaseWaits + b.Stats().LeaseWaits
	assert.Equal(t, int64(1), waits, "exactly one instance waited for the other's lease")
	sources := map[outcome.Source]int{results[0].Source: 1}
	sources[results[1].Source]++
	assert.Equal(t, map[outcome.Source]int{outcome.SourceResponse: 1, outcome.SourceStore: 1}, sources)
	rec, err := sa.GetByIntent(ctx, "", "order-42")
	require.NoError(t, err)
	assert.Equal(t, keystore.StateSucceeded, rec.State)
	assert.Equal(t, int64(1), rec.Fence, "created claimed, never claimed again")
}

// StaleOwnerWakes: instance A's first attempt gets a 503 and A waits; during the wait its
// lease expires and instance B, recovering, claims the record and completes it. When A wakes,
// its fenced renewal is refused: A returns ErrLeaseLost without sending again and writes
// nothing over B's record.
func StaleOwnerWakes(t *testing.T, stores Stores) {
	sa, sb := stores(t)
	clock := NewClock()
	srv := idemtest.NewServer(idemtest.Config{Now: clock.Now, RetryAfter: -1})
	t.Cleanup(srv.Close)
	// B's takeover is allowed by the shared clock advanced past A's lease, 31 s ahead of a
	// store's clock: the skew check would refuse it, so this scenario turns it off.
	b := Instance(t, srv, sb, clock, "instance-b", func(c *idem.Config) { c.Fleet.MaxClockSkew = -1 })
	var recovered idem.RecoverReport
	var recoverErr error
	var lost []event.ClaimLost
	a := Instance(t, srv, sa, clock, "instance-a", func(c *idem.Config) {
		c.Hooks.OnClaimLost = func(ev event.ClaimLost) { lost = append(lost, ev) }
		slept := false
		c.Sleep = func(ctx context.Context, d time.Duration) error {
			if !slept { // A stalls (a GC pause, a frozen VM) past its lease; B takes over
				slept = true
				clock.Advance(c.Fleet.LeaseTTL + time.Second)
				recovered, recoverErr = b.Recover(ctx, nil)
			}
			return nil
		}
	})
	srv.Script(idemtest.Fault503)
	ctx := context.Background()
	op := payment("order-7", idem.WithIntent("order-7"))
	_, err := a.Do(ctx, op)
	require.NoError(t, recoverErr)
	assert.Equal(t, 1, recovered.Succeeded, "B finished the record")
	require.ErrorIs(t, err, idem.ErrLeaseLost)
	require.ErrorIs(t, err, keystore.ErrFenced)
	var oe *idem.OperationError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, 1, oe.Attempts, "A sent once (the 503) and never again")
	assert.Equal(t, 2, srv.AttemptsFor(op.Key()), "A's 503 and B's send: nothing after A woke")
	assert.Equal(t, 1, srv.ExecutionsFor(op.Key()))
	assert.Equal(t, int64(1), a.Stats().ClaimsLost)
	require.Len(t, lost, 1)
	assert.Equal(t, int64(1), lost[0].Fence)
	assert.Equal(t, int64(2), lost[0].Current)
	assert.Equal(t, "instance-b", lost[0].Owner)
	rec, err := sb.Get(ctx, "", op.Key())
	require.NoError(t, err)
	assert.Equal(t, keystore.StateSucceeded, rec.State, "B's outcome stands")
	assert.Equal(t, "instance-b", rec.Owner)
	assert.Equal(t, int64(2), rec.Fence)
	assert.Equal(t, 2, rec.Attempts, "A's attempt (written while A held the lease) and B's")
}

// TakenDuringAttempt: while A's attempt is at the server, its record is claimed by another
// instance (A's lease had expired). The attempt answers 503; A's progress write is fenced:
// A stops with ErrLeaseLost, the record keeps the new owner's lease and contents.
func TakenDuringAttempt(t *testing.T, stores Stores) {
	sa, sb := stores(t)
	clock := NewClock()
	var key atomic.Value
	srv := idemtest.NewServer(idemtest.Config{Now: clock.Now, RetryAfter: -1, OnPayment: func(r *http.Request) {
		k := r.Header.Get("Idempotency-Key")
		if key.CompareAndSwap(nil, k) {
			clock.Advance(31 * time.Second)
			now := clock.Now()
			_, err := sb.Claim(context.Background(), "", k, keystore.Lease{Owner: "instance-b", Now: now, Until: now.Add(time.Minute)})
			if err != nil {
				panic(fmt.Sprintf("takeover claim: %v", err))
			}
		}
	}})
	t.Cleanup(srv.Close)
	a := Instance(t, srv, sa, clock, "instance-a", nil)
	srv.Script(idemtest.Fault503)
	ctx := context.Background()
	op := payment("order-8")
	_, err := a.Do(ctx, op)
	require.ErrorIs(t, err, idem.ErrLeaseLost)
	assert.Equal(t, 1, srv.AttemptsFor(op.Key()), "no resend after the fenced write")
	assert.Equal(t, 0, srv.ExecutionsFor(op.Key()))
	rec, err := sb.Get(ctx, "", op.Key())
	require.NoError(t, err)
	assert.Equal(t, keystore.StatePending, rec.State)
	assert.Equal(t, "instance-b", rec.Owner, "A did not release B's lease")
	assert.Equal(t, int64(2), rec.Fence)
	assert.Equal(t, 0, rec.Attempts, "A's progress write was refused")
	assert.Equal(t, int64(1), a.Stats().ClaimsLost)
}

// RecoverTogether: n pending records left by a dead instance (leases expired) and one held
// by a live instance; two instances Recover at the same moment. Every orphan is sent by
// exactly one of them, once; the live instance's record is left alone.
func RecoverTogether(t *testing.T, stores Stores, n int) {
	sa, sb := stores(t)
	// The instances check their clock against pgstore's while they reclaim orphans: a clock
	// frozen at the start fell more than MaxClockSkew behind on a loaded machine.
	clock := FollowingClock()
	srv := idemtest.NewServer(idemtest.Config{Now: clock.Now})
	t.Cleanup(srv.Close)
	ctx := context.Background()
	created := clock.Now().Add(-time.Minute)
	keys := make([]string, n)
	for i := range keys {
		op := payment(fmt.Sprintf("ref-%d", i))
		keys[i] = op.Key()
		require.NoError(t, sa.Create(ctx, pendingRecord(op, "dead-instance", created, created.Add(30*time.Second))))
	}
	live := payment("ref-live")
	require.NoError(t, sa.Create(ctx, pendingRecord(live, "live-instance", created, clock.Now().Add(time.Hour))))

	cfg := func(c *idem.Config) { c.RecoverConcurrency = 4 }
	insts := []*idem.Client{Instance(t, srv, sa, clock, "instance-a", cfg), Instance(t, srv, sb, clock, "instance-b", cfg)}
	reps := make([]idem.RecoverReport, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, c := range insts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			reps[i], errs[i] = c.Recover(ctx, nil)
		}()
	}
	close(start)
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	for _, k := range keys {
		require.Equal(t, 1, srv.AttemptsFor(k), "key %s sent once fleet-wide", k)
		require.Equal(t, 1, srv.ExecutionsFor(k))
		rec, err := sb.Get(ctx, "", k)
		require.NoError(t, err)
		require.Equal(t, keystore.StateSucceeded, rec.State)
	}
	assert.Equal(t, n, reps[0].Succeeded+reps[1].Succeeded)
	assert.Equal(t, int64(n), insts[0].Stats().OrphansReclaimed+insts[1].Stats().OrphansReclaimed)
	assert.Equal(t, 0, srv.AttemptsFor(live.Key()), "a live lease of another instance is left alone")
	rec, err := sa.Get(ctx, "", live.Key())
	require.NoError(t, err)
	assert.Equal(t, "live-instance", rec.Owner)
	assert.Equal(t, int64(1), rec.Fence)
	for i, rep := range reps { // and records the other instance was sending at that moment
		assert.GreaterOrEqual(t, rep.Skipped, 1, "instance %d saw the live record and left it", i)
		assert.Equal(t, rep.Pending, rep.Succeeded+rep.Skipped, "instance %d", i)
	}
}

// pendingRecord is the record Do persists for op before its first send, claimed by owner.
func pendingRecord(op *idem.Operation, owner string, created, until time.Time) *keystore.Record {
	return &keystore.Record{Key: op.Key(), Fingerprint: idem.Fingerprint(op.Method(), op.URL(), op.Body()),
		State: keystore.StatePending, Attempts: 1,
		Request:   keystore.Request{Method: op.Method(), URL: op.URL(), Header: http.Header{"Content-Type": {"application/json"}}, Body: op.Body()},
		CreatedAt: created, UpdatedAt: created, Owner: owner, LeaseUntil: until, Fence: 1}
}
