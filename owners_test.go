package idem

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
)

// A closed Client's owner stays live while a Do or Recover of it runs, and no longer: then
// another Client of the process takes a lease it left at once (exclusive store) instead of
// waiting LeaseTTL. Two Clients sharing an owner id keep it live until both are done.
func TestClosedClientOwnerIsForgottenWhenIdle(t *testing.T) {
	store := openBolt(t)
	e := newEnv(t, idemtest.Config{}, func(c *Config) { c.Store, c.Fleet.Owner = store, "owner-a" })
	b, err := NewClient(Config{BaseURL: e.srv.URL, Store: store, KeyStatusURL: statusPath, Fleet: FleetConfig{Owner: "owner-b"},
		Now: e.clock.Now, Sleep: e.clock.Sleep, Budget: BudgetConfig{Disabled: true}})
	require.NoError(t, err)
	defer b.Close()
	left := &keystore.Record{Owner: "owner-a"}

	require.False(t, b.deadOwner(left), "a's client is open")
	e.c.enter() // a call of a's client under way
	require.NoError(t, e.c.Close())
	assert.False(t, b.deadOwner(left), "closed, but a call still runs")
	e.c.exit()
	assert.True(t, b.deadOwner(left), "closed and idle")
	e.c.enter() // Do after Close holds the owner again
	assert.False(t, b.deadOwner(left))
	e.c.exit()
	assert.True(t, b.deadOwner(left))
	require.NoError(t, e.c.Close()) // twice: no effect
	assert.True(t, b.deadOwner(left))

	twin, err := NewClient(Config{BaseURL: e.srv.URL, Store: store, Fleet: FleetConfig{Owner: "owner-b"}})
	require.NoError(t, err)
	require.NoError(t, twin.Close())
	assert.False(t, b.deadOwner(&keystore.Record{Owner: "owner-b"}), "b itself is still open")

	// End to end: the record a's client left leased is taken by b at once.
	ctx := context.Background()
	op := payment(100, "ref-owner")
	now := e.clock.Now()
	require.NoError(t, store.Create(ctx, &keystore.Record{Key: op.Key(), Fingerprint: Fingerprint(op.method, op.url, op.body),
		State: keystore.StatePending, Request: keystore.Request{Method: op.method, URL: op.url, Body: op.body},
		CreatedAt: now, UpdatedAt: now, Owner: "owner-a", LeaseUntil: now.Add(time.Hour), Fence: 1}))
	_, err = b.Do(ctx, op)
	require.NoError(t, err)
	assert.Empty(t, e.clock.Sleeps(), "no wait for the closed client's lease")
	assert.Equal(t, int64(1), b.Stats().OrphansReclaimed)
	assert.Equal(t, 1, e.srv.ExecutionsByReference("ref-owner"))
}

// Calls entering and leaving while Close runs: each call sees its owner live while it runs,
// and once all are done and the client is closed, it is not.
func TestOwnerHoldUnderConcurrentClose(t *testing.T) {
	for round := range 50 {
		c, err := NewClient(Config{BaseURL: "http://127.0.0.1:1", Fleet: FleetConfig{Owner: "owner-race"}})
		require.NoError(t, err)
		var wg sync.WaitGroup
		var notLive atomic.Int64
		for g := range 8 {
			wg.Go(func() {
				for i := range 50 {
					c.enter()
					if !ownerLive("owner-race") {
						notLive.Add(1)
					}
					c.exit()
					if g == 0 && i == round%50 {
						require.NoError(t, c.Close())
					}
				}
			})
		}
		wg.Wait()
		require.Zero(t, notLive.Load(), "a running call's owner was not live")
		require.NoError(t, c.Close())
		require.False(t, ownerLive("owner-race"), "closed and idle, round %d", round)
	}
}

// Do works after Close, so a call running at Close keeps its lease renewed: the server
// answers only once a renewal made after Close has arrived.
func TestRenewalContinuesAfterClose(t *testing.T) {
	store := &renewSignal{countingStore: countingStore{Store: openBolt(t)}, renewed: make(chan error, 1)}
	arrived, closed := make(chan struct{}), make(chan struct{})
	e := newEnv(t, idemtest.Config{OnPayment: func(*http.Request) {
		close(arrived)
		<-closed
		for { // a renewal made after Close
			select {
			case err := <-store.renewed:
				assert.NoError(t, err)
				return
			case <-time.After(3 * time.Second):
				t.Error("no renewal after Close while the attempt was in flight")
				return
			}
		}
	}}, func(c *Config) { c.Store = store })
	e.c.renewer.every = 50 * time.Millisecond // the first renewal falls after Close
	go func() {
		<-arrived
		require.NoError(t, e.c.Close())
		for len(store.renewed) > 0 { // drop one made before Close
			<-store.renewed
		}
		close(closed)
	}()
	res, err := e.c.Do(context.Background(), payment(100, "ref-after-close"))
	require.NoError(t, err)
	assert.Equal(t, 1, res.Attempts)
}
