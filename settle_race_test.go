package idem

import (
	"context"
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
	assert.Equal(t, ReasonNotExecuted, rec.Reason)
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
