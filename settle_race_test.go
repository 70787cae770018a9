package idem

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
)

// Two instances look up one manual record at once (manual records hold no lease). The first
// verdict persisted stands: a later verdict, here one formed after the application paid
// again under a new intent (a search by reference would then find that payment), never
// overwrites it. Without the re-read in settle, the not-executed record turned succeeded.
func TestConcurrentLookupsFirstVerdictStands(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, nil)
	e.srv.Script(idemtest.FaultStored500)
	op := payment(700, "order-1", WithIntent("order-1"))
	_, err := e.c.Do(context.Background(), op)
	require.ErrorIs(t, err, ErrStoredServerError)
	require.Equal(t, keystore.StateManual, e.record(op.Key()).State)

	instance := func(lookup LookupFunc) *Client {
		c, err := NewClient(Config{BaseURL: e.srv.URL, Store: e.store, KeyStatusURL: statusPath,
			Now: e.clock.Now, Sleep: e.clock.Sleep, Budget: BudgetConfig{Disabled: true}, Lookup: lookup})
		require.NoError(t, err)
		return c
	}
	entered, release := make(chan struct{}), make(chan struct{})
	late := instance(func(ctx context.Context, req LookupRequest) (Resolution, error) {
		close(entered)
		<-release // meanwhile the other instance settles and the application pays again
		return Resolution{Verdict: VerdictExecuted, Note: "late: found a charge for order-1",
			Response: &keystore.Response{StatusCode: 200, Body: []byte(`{"id":"pay_2"}`)}}, nil
	})
	first := instance(func(ctx context.Context, req LookupRequest) (Resolution, error) {
		return Resolution{Verdict: VerdictNotExecuted, Note: "first: no charge for order-1"}, nil
	})

	var lateOut []Reconciled
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := late.Recover(context.Background(), func(r Reconciled) { lateOut = append(lateOut, r) })
		assert.NoError(t, err)
	})
	<-entered
	rep, err := first.Recover(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Resolved)
	close(release)
	wg.Wait()

	rec := e.record(op.Key())
	assert.Equal(t, keystore.StateFailed, rec.State, "the first verdict stands")
	assert.Equal(t, keystore.ReasonNotExecuted, rec.Reason)
	assert.Equal(t, "first: no charge for order-1", rec.Note)
	require.Len(t, lateOut, 1)
	assert.ErrorIs(t, lateOut[0].Err, ErrNotExecuted, "the late instance reports the stored verdict")
	assert.Nil(t, lateOut[0].Result)
	assert.Equal(t, int64(0), late.Stats().ResolvedByLookup, "the late verdict was not persisted")

	// An operator's Resolve after that is refused: the record is not manual any more.
	_, err = first.Resolve(context.Background(), "", op.Key(), Resolution{Verdict: VerdictExecuted,
		Response: &keystore.Response{StatusCode: 200}})
	assert.ErrorIs(t, err, ErrNotManual)
	assert.Equal(t, 1, e.srv.Attempts(), "nothing was resent")
}

// getBarrier is a Memory whose Get holds the answer to the second Get of each caller (a Resolve's re-read
// in settle; callers are told apart by a context value) until every caller has made it: both
// instances read the record as manual before either writes. Its other methods,
// UpdateFromState included, are Memory's.
type getBarrier struct {
	*keystore.Memory
	mu      sync.Mutex
	gets    map[int]int // Gets per caller
	waiting int
	callers int
	all     chan struct{}
}

type callerID struct{}

func (b *getBarrier) Get(ctx context.Context, scope, key string) (*keystore.Record, error) {
	rec, err := b.Memory.Get(ctx, scope, key) // read first, then wait: both see the same state
	if id, ok := ctx.Value(callerID{}).(int); ok {
		b.mu.Lock()
		b.gets[id]++
		if b.gets[id] == 2 {
			b.waiting++
			if b.waiting == b.callers {
				close(b.all)
			}
			b.mu.Unlock()
			<-b.all
		} else {
			b.mu.Unlock()
		}
	}
	return rec, err
}

// Two operators settle one manual record at once, from two processes, with opposite
// verdicts, both past settle's re-read: exactly one is told its verdict was persisted, the
// other gets ErrNotManual, and the stored record is the winner's. Before the store made the
// write conditional, both were told so and the later one stood.
func TestConcurrentOperatorVerdictsOneWins(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, nil)
	e.srv.Script(idemtest.FaultStored500AfterCharge)
	op := payment(701, "order-2", WithIntent("order-2"))
	_, err := e.c.Do(context.Background(), op)
	require.ErrorIs(t, err, ErrStoredServerError)
	require.Equal(t, keystore.StateManual, e.record(op.Key()).State)

	mem, ok := e.store.(*keystore.Memory)
	require.True(t, ok, "the test env's store is a Memory")
	shared := &getBarrier{Memory: mem, gets: map[int]int{}, callers: 2, all: make(chan struct{})}
	instance := func() *Client {
		c, err := NewClient(Config{BaseURL: e.srv.URL, Store: shared, KeyStatusURL: statusPath,
			Now: e.clock.Now, Sleep: e.clock.Sleep, Budget: BudgetConfig{Disabled: true}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	verdicts := []Resolution{
		{Verdict: VerdictExecuted, Note: "ops A: charge found", Response: &keystore.Response{StatusCode: 200, Body: []byte(`{"id":"pay_9"}`)}},
		{Verdict: VerdictNotExecuted, Note: "ops B: no charge found"},
	}
	out := make([]*keystore.Record, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, c := range []*Client{instance(), instance()} {
		ctx := context.WithValue(context.Background(), callerID{}, i)
		wg.Go(func() { out[i], errs[i] = c.Resolve(ctx, "", op.Key(), verdicts[i]) })
	}
	wg.Wait()

	won := -1
	for i, err := range errs {
		if err == nil {
			require.Equal(t, -1, won, "both verdicts reported as persisted: %v", errs)
			won = i
		} else {
			assert.ErrorIs(t, err, ErrNotManual, "the losing verdict")
		}
	}
	require.NotEqual(t, -1, won, "no verdict persisted: %v", errs)
	stored := e.record(op.Key())
	assert.Equal(t, out[won].State, stored.State, "the stored record is the winner's")
	assert.Equal(t, verdicts[won].Note, stored.Note)
}

// A verdict's answer is persisted as a call's would be: without credentials, Set-Cookie or
// Config.SecretHeaders.
func TestResolveDoesNotPersistSecretHeaders(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, func(c *Config) { c.SecretHeaders = []string{"X-Api-Key"} })
	e.srv.Script(idemtest.FaultStored500AfterCharge)
	op := payment(702, "order-3")
	_, err := e.c.Do(context.Background(), op)
	require.ErrorIs(t, err, ErrStoredServerError)

	hdr := http.Header{"X-Api-Key": {"sk_live_1"}, "Set-Cookie": {"s=1"}, "Authorization": {"Bearer t"},
		"Content-Type": {"application/json"}}
	_, err = e.c.Resolve(context.Background(), "", op.Key(), Resolution{Verdict: VerdictExecuted,
		Response: &keystore.Response{StatusCode: 200, Header: hdr, Body: []byte(`{"id":"pay_3"}`)}})
	require.NoError(t, err)
	stored := e.record(op.Key())
	require.NotNil(t, stored.Response)
	assert.Equal(t, http.Header{"Content-Type": {"application/json"}}, stored.Response.Header)
	assert.Equal(t, "sk_live_1", hdr.Get("X-Api-Key"), "the caller's header is left as it was")
}
