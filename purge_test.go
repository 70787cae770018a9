package idem

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// stepStore wraps a bbolt store and pauses the background purge after a given step, so that
// a test can run a Do between two steps.
type stepStore struct {
	*boltstore.Store
	mu      sync.Mutex
	limits  []int // the limit of every PurgeBatch call
	deleted []int // what each deleted
	pauseAt int
	paused  chan struct{}
	resume  chan struct{}
}

func (s *stepStore) PurgeBatch(ctx context.Context, cutoff time.Time, after keystore.Cursor, limit int) (int, keystore.Cursor, error) {
	n, next, err := s.Store.PurgeBatch(ctx, cutoff, after, limit)
	s.mu.Lock()
	s.limits, s.deleted = append(s.limits, limit), append(s.deleted, n)
	step := len(s.deleted)
	s.mu.Unlock()
	if step == s.pauseAt {
		close(s.paused)
		<-s.resume
	}
	return n, next, err
}

// The running client purges old records in bounded steps, off the call path: a pass is due
// by the injected clock, each step deletes at most PurgeBatch records in one commit, and a Do
// runs to its end between two steps of a pass that is far from done.
func TestBackgroundPurgeInBoundedSteps(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	bolt, err := boltstore.Open(filepath.Join(t.TempDir(), "keys.db"), nil)
	require.NoError(t, err)
	defer bolt.Close()
	const old, batch = 1000, 50
	for i := range old {
		rec := newPendingRecord(fmt.Sprintf("old-%04d", i), 100, "old", clock.Now())
		require.NoError(t, bolt.Create(ctx, rec))
		rec.State = keystore.StateSucceeded
		require.NoError(t, bolt.Update(ctx, rec))
	}
	// The old records are 90 minutes old when the client starts, and the pass comes 2 minutes
	// later (cutoff: 32 minutes after them), so the first payment, made in between, is never
	// purgeable. When it was made at the old records' time it was purged or not depending on
	// whether its deferred final write had been committed when the pass scanned it.
	clock.Advance(90 * time.Minute)
	store := &stepStore{Store: bolt, pauseAt: 3, paused: make(chan struct{}), resume: make(chan struct{})}
	srv := idemtest.NewServer(idemtest.Config{Now: clock.Now})
	defer srv.Close()
	c, err := NewClient(Config{BaseURL: srv.URL, Store: store, KeyStatusURL: statusPath, Now: clock.Now, Sleep: clock.Sleep,
		KeyTTL: time.Hour, Retention: time.Hour, PurgeInterval: time.Minute, PurgeBatch: batch})
	require.NoError(t, err)
	defer c.Close()

	_, err = c.Do(ctx, payment(1, "before"))
	require.NoError(t, err)
	store.mu.Lock()
	require.Empty(t, store.deleted, "no pass is due before PurgeInterval")
	store.mu.Unlock()

	clock.Advance(2 * time.Minute)
	_, err = c.Do(ctx, payment(2, "starts the pass")) // starts the pass, does not wait for it
	require.NoError(t, err)
	<-store.paused // the pass is between steps 3 and 4
	res, err := c.Do(ctx, payment(3, "during the pass"))
	require.NoError(t, err)
	assert.Equal(t, 1, res.Attempts)
	store.mu.Lock()
	assert.Len(t, store.deleted, 3, "the Do ran while the pass was paused")
	store.mu.Unlock()
	close(store.resume)
	c.purger.wg.Wait() // the pass runs to its end

	store.mu.Lock()
	defer store.mu.Unlock()
	total := 0
	for i, n := range store.deleted {
		assert.Equal(t, batch, store.limits[i], "step %d", i)
		assert.LessOrEqual(t, n, batch, "step %d deleted more than a batch", i)
		total += n
	}
	assert.Equal(t, old, total, "steps %v", store.deleted)
	assert.GreaterOrEqual(t, len(store.deleted), old/batch)
	recs, err := bolt.List(ctx)
	require.NoError(t, err)
	assert.Len(t, recs, 3, "only the three new payments remain")
	for _, r := range recs {
		assert.Equal(t, keystore.StateSucceeded, r.State)
	}
}

// Client.Close stops a background pass after its current step and waits for it.
func TestCloseStopsBackgroundPurge(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	bolt, err := boltstore.Open(filepath.Join(t.TempDir(), "keys.db"), nil)
	require.NoError(t, err)
	defer bolt.Close()
	const old, batch = 200, 10
	for i := range old {
		rec := newPendingRecord(fmt.Sprintf("old-%04d", i), 100, "old", clock.Now())
		require.NoError(t, bolt.Create(ctx, rec))
		rec.State = keystore.StateFailed
		require.NoError(t, bolt.Update(ctx, rec))
	}
	store := &stepStore{Store: bolt, pauseAt: 2, paused: make(chan struct{}), resume: make(chan struct{})}
	srv := idemtest.NewServer(idemtest.Config{Now: clock.Now})
	defer srv.Close()
	c, err := NewClient(Config{BaseURL: srv.URL, Store: store, KeyStatusURL: statusPath, Now: clock.Now, Sleep: clock.Sleep,
		KeyTTL: time.Hour, Retention: time.Hour, PurgeInterval: time.Minute, PurgeBatch: batch})
	require.NoError(t, err)
	clock.Advance(2 * time.Hour)
	// The pass starts at the top of Do, before the Do writes its pending record, and a step
	// examines PurgeBatch records in key order: a key that sorts after every old record keeps
	// the first steps at exactly batch old records each, however the two goroutines interleave.
	_, err = c.Do(ctx, payment(1, "starts the pass", WithKey("pay-0001")))
	require.NoError(t, err)
	<-store.paused
	closed := make(chan error)
	go func() { closed <- c.Close() }()
	// Close waits for the paused step; once it resumes, the pass stops at the next step.
	<-c.purger.ctx.Done() // Close cancels before it waits
	close(store.resume)
	require.NoError(t, <-closed)
	store.mu.Lock()
	steps, deleted := len(store.deleted), 0
	for _, n := range store.deleted {
		deleted += n
	}
	store.mu.Unlock()
	assert.Equal(t, 3, steps, "two steps, then one refused by the cancelled context")
	assert.Equal(t, 2*batch, deleted)
	recs, err := bolt.List(ctx, keystore.StateFailed)
	require.NoError(t, err)
	assert.Len(t, recs, old-2*batch)
	// No further pass starts after Close.
	clock.Advance(2 * time.Hour)
	_, err = c.Do(ctx, payment(2, "after close"))
	require.NoError(t, err)
	c.purger.wg.Wait()
	store.mu.Lock()
	assert.Equal(t, 3, len(store.deleted))
	store.mu.Unlock()
}
