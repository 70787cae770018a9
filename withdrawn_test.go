package idem

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

// A Create that reported an error withdraws the record (TestCreateErrorWithdrawsTheRecord),
// and Do says that nothing was sent and the call may be retried. Retried for the same intent,
// the withdrawn record used to answer ErrNotExecuted for ever: the intent (often the order's
// reference) could never be paid (adversarial run). It is sent now, under its own key: the
// intent binds that key, so no other key can have paid the intent meanwhile. A Recover
// afterwards sends nothing more.
func TestWithdrawnIntentIsSentWhenRetried(t *testing.T) {
	for _, fail := range []createFailure{createCommittedLost, createLost} {
		t.Run(map[createFailure]string{createCommittedLost: "committed", createLost: "not committed"}[fail], func(t *testing.T) {
			a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, _ int64) { a.charge(w, key, ref) })
			store := &slowStore{Memory: keystore.NewMemory(), failCreate: fail}
			c, clk := ledgerClient(t, a, func(cfg *Config) { cfg.Store = store })
			op := payment(1, "order-w", WithIntent("order-w"))
			_, err := c.Do(context.Background(), op)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.NotContains(t, err.Error(), "could not be withdrawn")
			require.EqualValues(t, 0, a.posts.Load())
			// Listed apart from a "not executed" verdict (an operator reading not_executed
			// paid a new intent while the intent's retry sent this one: adversarial run).
			w, err := store.Memory.Get(context.Background(), "", op.Key())
			require.NoError(t, err)
			assert.Equal(t, keystore.ReasonWithdrawn, w.Reason)

			// Retried as told, with a new Operation of the same intent (a restarted process).
			res, err := c.Do(context.Background(), payment(1, "order-w", WithIntent("order-w")))
			require.NoError(t, err)
			assert.Equal(t, http.StatusCreated, res.StatusCode)
			assert.Equal(t, op.Key(), res.Key, "the withdrawn record's key")
			assert.Equal(t, 1, res.Attempts)
			assert.Equal(t, 1, a.charges("order-w"))
			rec, err := store.Memory.Get(context.Background(), "", op.Key())
			require.NoError(t, err)
			assert.Equal(t, keystore.StateSucceeded, rec.State)
			assert.Empty(t, rec.Note)

			// Again: the stored outcome; and Recover past the lease sends nothing.
			res, err = c.Do(context.Background(), op)
			require.NoError(t, err)
			assert.Equal(t, outcome.SourceStore, res.Source)
			clk.Advance(defaultLeaseTTL + time.Second)
			_, err = c.Recover(context.Background(), nil)
			require.NoError(t, err)
			assert.EqualValues(t, 1, a.posts.Load())
			assert.Equal(t, 1, a.charges("order-w"))
		})
	}
}

// gatedStore's first Create commits, then waits for release before it reports an error (a
// connection lost after COMMIT, slow to surface).
type gatedStore struct {
	*keystore.Memory
	armed     atomic.Bool
	committed chan struct{}
	release   chan struct{}
}

func (s *gatedStore) Create(ctx context.Context, r *keystore.Record) error {
	if s.armed.CompareAndSwap(true, false) {
		if err := s.Memory.Create(ctx, r); err != nil {
			return err
		}
		close(s.committed)
		<-s.release
		return errCreateLost
	}
	return s.Memory.Create(ctx, r)
}

// Two instances share a store. A's Create commits but reports an error late; B's Do of the
// intent finds the pending record and waits on A's lease, and A withdraws it meanwhile. B
// answered ErrNotExecuted, after which an application may pay under a new intent, while A's
// caller, told to retry, revived the intent: charged twice (adversarial run). B revives and
// sends it itself now; A's retry gets the stored outcome.
func TestWithdrawnWhileAnotherInstanceWaits(t *testing.T) {
	a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, _ int64) { a.charge(w, key, ref) })
	gs := &gatedStore{Memory: keystore.NewMemory(), committed: make(chan struct{}), release: make(chan struct{})}
	gs.armed.Store(true)
	mk := func(owner string) *Client {
		c, err := NewClient(Config{BaseURL: a.srv.URL, KeyStatusURL: statusPath, Store: gs, Fleet: FleetConfig{Owner: owner},
			Budget: BudgetConfig{Disabled: true}})
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	ca, cb := mk("instance-a"), mk("instance-b")
	errA := make(chan error, 1)
	go func() {
		_, err := ca.Do(context.Background(), payment(1, "order-x", WithIntent("order-x")))
		errA <- err
	}()
	<-gs.committed
	type out struct {
		res *Result
		err error
	}
	outB := make(chan out, 1)
	go func() {
		res, err := cb.Do(context.Background(), payment(1, "order-x", WithIntent("order-x")))
		outB <- out{res, err}
	}()
	for cb.Stats().LeaseWaits == 0 {
		time.Sleep(time.Millisecond)
	}
	close(gs.release)
	require.ErrorIs(t, <-errA, context.DeadlineExceeded) // A: nothing sent, the record withdrawn
	b := <-outB
	require.NoError(t, b.err, "B must send the withdrawn intent, not answer ErrNotExecuted")
	assert.Equal(t, http.StatusCreated, b.res.StatusCode)
	res, err := ca.Do(context.Background(), payment(1, "order-x", WithIntent("order-x")))
	require.NoError(t, err)
	assert.Equal(t, outcome.SourceStore, res.Source)
	assert.Equal(t, 1, a.charges("order-x"))
	assert.EqualValues(t, 1, a.posts.Load())
}

// A corrected request under a withdrawn intent is key reuse, and the advice must not say to
// pay it under a new intent: the intent's own retry will send the withdrawn request
// (adversarial run: following "send this one as a new intent" charged twice).
func TestConflictAdviceOnAWithdrawnIntent(t *testing.T) {
	a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, _ int64) { a.charge(w, key, ref) })
	store := &slowStore{Memory: keystore.NewMemory(), failCreate: createCommittedLost}
	c, _ := ledgerClient(t, a, func(cfg *Config) { cfg.Store = store })
	_, err := c.Do(context.Background(), payment(1, "order-c", WithIntent("order-c")))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = c.Do(context.Background(), payment(2, "order-c", WithIntent("order-c")))
	require.ErrorIs(t, err, ErrKeyConflict)
	assert.Contains(t, err.Error(), "withdrawn before it was sent and goes out when its intent is retried")
	assert.NotContains(t, err.Error(), "send this one as a new intent")
	assert.EqualValues(t, 0, a.posts.Load())
}

// readHookStore runs after on the second GetByIntent (open's read, after Do's first).
type readHookStore struct {
	*keystore.Memory
	after func()
	n     atomic.Int32
}

func (s *readHookStore) GetByIntent(ctx context.Context, scope, intent string) (*keystore.Record, error) {
	r, err := s.Memory.GetByIntent(ctx, scope, intent)
	if err == nil && s.after != nil && s.n.Add(1) == 2 {
		s.after()
	}
	return r, err
}

// B read the withdrawn record; A revived, sent and succeeded meanwhile; B's revival, fenced,
// returned a plain error saying "nothing was sent" about a paid intent (adversarial run). B
// reads the record again and returns the stored outcome.
func TestStaleRevivalReadsTheRecordAgain(t *testing.T) {
	a := newLedgerAPI(t, func(a *ledgerAPI, w http.ResponseWriter, key, ref string, _ int64) { a.charge(w, key, ref) })
	mem := keystore.NewMemory()
	ca, clk := ledgerClient(t, a, func(cfg *Config) { cfg.Store = &slowStore{Memory: mem, failCreate: createLost} })
	rb := &readHookStore{Memory: mem}
	cb, err := NewClient(Config{BaseURL: a.srv.URL, KeyStatusURL: statusPath, Now: clk.Now, Sleep: clk.Sleep,
		Budget: BudgetConfig{Disabled: true}, Store: rb, Fleet: FleetConfig{Owner: "instance-b"}})
	require.NoError(t, err)
	defer cb.Close()
	_, err = ca.Do(context.Background(), payment(1, "order-st", WithIntent("order-st")))
	require.Error(t, err)
	rb.after = func() {
		_, err := ca.Do(context.Background(), payment(1, "order-st", WithIntent("order-st")))
		require.NoError(t, err)
	}
	res, err := cb.Do(context.Background(), payment(1, "order-st", WithIntent("order-st")))
	require.NoError(t, err)
	assert.Equal(t, outcome.SourceStore, res.Source)
	assert.Equal(t, 1, a.charges("order-st"))
	assert.EqualValues(t, 1, a.posts.Load())
}
