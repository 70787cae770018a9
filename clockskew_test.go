package idem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/event"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

// clockStore is Memory shared by a fleet with an authoritative clock (keystore.Clock), set by
// the test, that counts its reads.
type clockStore struct {
	*keystore.Memory
	mu     sync.Mutex
	now    time.Time
	err    error
	reads  int
	during func() // run inside a read (a step of the client's clock during the round trip)
}

func (s *clockStore) Now(ctx context.Context) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	if s.during != nil {
		s.during()
	}
	return s.now, s.err
}

func (s *clockStore) clockReads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

// skewEnv is a client on a clockStore whose clock is the client's minus ahead (the client is
// ahead of the store by ahead; negative: behind).
type skewEnv struct {
	*env
	store *clockStore
	skews []event.ClockSkew
	mu    sync.Mutex
}

func newSkewEnv(t *testing.T, ahead time.Duration, mod func(*Config)) *skewEnv {
	t.Helper()
	se := &skewEnv{store: &clockStore{Memory: keystore.NewMemory()}}
	se.env = newEnv(t, idemtest.Config{RetryAfter: -1}, func(c *Config) {
		c.Store = se.store
		c.Fleet.Owner = "instance-a"
		c.PurgeInterval = -1
		c.Hooks.OnClockSkew = func(ev event.ClockSkew) {
			se.mu.Lock()
			defer se.mu.Unlock()
			se.skews = append(se.skews, ev)
		}
		if mod != nil {
			mod(c)
		}
	})
	se.env.store = se.store
	se.store.now = se.clock.Now().Add(-ahead)
	t.Cleanup(func() { _ = se.c.Close() })
	return se
}

func (se *skewEnv) events() []event.ClockSkew {
	se.mu.Lock()
	defer se.mu.Unlock()
	return append([]event.ClockSkew(nil), se.skews...)
}

// seed stores, by the store's clock: a succeeded record 100 h old (past Retention for every
// clock), a succeeded record of intent "order-fresh" 1 h old, and a pending orphan of a dead
// instance whose lease expired a minute ago.
func (se *skewEnv) seed(t *testing.T) (old, fresh, orphan *keystore.Record) {
	t.Helper()
	ctx := context.Background()
	now := se.store.now
	done := func(key, intent string, at time.Time) *keystore.Record {
		rec := newPendingRecord(key, 100, key, at)
		rec.Intent, rec.State, rec.LastStatusCode = intent, keystore.StateSucceeded, 201
		require.NoError(t, se.store.Create(ctx, rec))
		return rec
	}
	old = done("key-old", "order-old", now.Add(-100*time.Hour))
	fresh = done("key-fresh", "order-fresh", now.Add(-time.Hour))
	orphan = newPendingRecord("key-orphan", 300, "orphan", now.Add(-time.Hour))
	orphan.Owner, orphan.LeaseUntil, orphan.Fence = "dead-instance", now.Add(-time.Minute), 1
	require.NoError(t, se.store.Create(ctx, orphan))
	return old, fresh, orphan
}

func (se *skewEnv) exists(t *testing.T, key string) bool {
	t.Helper()
	_, err := se.store.Get(context.Background(), "", key)
	if errors.Is(err, keystore.ErrNotFound) {
		return false
	}
	require.NoError(t, err)
	return true
}

// Recover compares the client's clock with the store's first: beyond MaxClockSkew, ahead or
// behind, it purges and claims nothing and returns a *ClockSkewError; within it, it purges
// what is past Retention and reclaims the orphan.
func TestRecoverClockSkew(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ahead   time.Duration
		refused bool
	}{
		{"in sync", 0, false},
		{"ahead within the bound", 4 * time.Second, false},
		{"behind within the bound", -4 * time.Second, false},
		{"ahead 80h", 80 * time.Hour, true},
		{"ahead just beyond the bound", DefaultMaxClockSkew + time.Millisecond, true},
		{"behind 1h", -time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			se := newSkewEnv(t, tc.ahead, nil)
			old, fresh, orphan := se.seed(t)
			rep, err := se.c.Recover(context.Background(), nil)
			byIntent, ierr := se.store.GetByIntent(context.Background(), "", "order-fresh")
			require.NoError(t, ierr, "the fresh intent is kept either way")
			assert.Equal(t, fresh.Key, byIntent.Key)
			if !tc.refused {
				require.NoError(t, err)
				assert.Equal(t, RecoverReport{Pending: 1, Succeeded: 1, Purged: 1}, rep)
				assert.False(t, se.exists(t, old.Key), "the old record is purged")
				assert.Equal(t, keystore.StateSucceeded, se.record(orphan.Key).State)
				assert.Equal(t, 1, se.srv.AttemptsFor(orphan.Key))
				assert.Equal(t, int64(0), se.c.Stats().ClockSkewRefusals)
				assert.Empty(t, se.events())
				// One read before the purge, one before each ClaimExpired batch (the orphan's,
				// then the empty one that ends the pass); none for the orphan's own sending.
				assert.Equal(t, 3, se.store.clockReads())
				return
			}
			require.ErrorIs(t, err, ErrClockSkew)
			var ce *ClockSkewError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, ClockSkewError{Op: "retention purge", Local: se.clock.Now(), Store: se.store.now,
				Skew: tc.ahead, Max: DefaultMaxClockSkew}, *ce)
			assert.Contains(t, err.Error(), "retention purge refused")
			assert.Contains(t, err.Error(), se.store.now.Format(time.RFC3339Nano))
			assert.Contains(t, err.Error(), "NTP")
			assert.Equal(t, RecoverReport{}, rep, "nothing done")
			assert.True(t, se.exists(t, old.Key), "nothing purged")
			rec := se.record(orphan.Key)
			assert.Equal(t, keystore.StatePending, rec.State, "the orphan is not claimed")
			assert.Equal(t, "dead-instance", rec.Owner)
			assert.Equal(t, int64(1), rec.Fence)
			assert.Equal(t, 0, se.srv.Stats().Requests, "nothing sent")
			assert.Equal(t, int64(1), se.c.Stats().ClockSkewRefusals)
			ev := se.events()
			require.Len(t, ev, 1)
			assert.Equal(t, ce, ev[0].Err)
			assert.Equal(t, "", ev[0].Key)
			assert.Equal(t, 1, se.store.clockReads())
		})
	}
}

// The background purge pass checks the clock first: the client 80 h ahead deletes nothing (a
// later Do of the fresh intent finds its record, nothing is sent); in sync, it deletes only
// the record past Retention.
func TestBackgroundPurgeClockSkew(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ahead   time.Duration
		refused bool
	}{
		{"in sync", 0, false},
		{"ahead 80h", 80 * time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			se := newSkewEnv(t, tc.ahead, func(c *Config) { c.PurgeInterval = time.Minute })
			old, fresh, _ := se.seed(t)
			se.clock.Advance(2 * time.Minute) // a pass is due
			se.store.mu.Lock()
			se.store.now = se.store.now.Add(2 * time.Minute)
			se.store.mu.Unlock()
			se.c.maybePurge()
			se.c.purger.wg.Wait()
			assert.Equal(t, 1, se.store.clockReads())
			assert.True(t, se.exists(t, fresh.Key), "a fresh record is never purged")
			assert.Equal(t, tc.refused, se.exists(t, old.Key))
			assert.Equal(t, map[bool]int64{true: 1, false: 0}[tc.refused], se.c.Stats().ClockSkewRefusals)
			assert.Len(t, se.events(), map[bool]int{true: 1, false: 0}[tc.refused])

			// The fresh intent is answered from its record: no new key, nothing sent.
			res, err := se.c.Do(context.Background(), payment(100, "key-fresh", WithIntent("order-fresh")))
			require.NoError(t, err)
			assert.Equal(t, outcome.SourceStore, res.Source)
			assert.Equal(t, fresh.Key, res.Key)
			assert.Equal(t, 0, se.srv.Stats().Requests)
		})
	}
}

// The background reclaimer checks the clock before each ClaimExpired: refused, the orphan
// stays as it was and nothing is sent.
func TestReclaimerClockSkew(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ahead   time.Duration
		refused bool
	}{
		{"in sync", 0, false},
		{"ahead 80h", 80 * time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			se := newSkewEnv(t, tc.ahead, nil)
			_, _, orphan := se.seed(t)
			se.c.reclaimNow(context.Background())
			rec := se.record(orphan.Key)
			if tc.refused {
				assert.Equal(t, keystore.StatePending, rec.State)
				assert.Equal(t, "dead-instance", rec.Owner)
				assert.Equal(t, int64(1), rec.Fence)
				assert.Equal(t, 0, se.srv.Stats().Requests)
				assert.Equal(t, int64(1), se.c.Stats().ClockSkewRefusals)
				ev := se.events()
				require.Len(t, ev, 1)
				var cse *ClockSkewError
				require.ErrorAs(t, ev[0].Err, &cse)
				assert.Equal(t, "orphan claim", cse.Op)
				assert.Equal(t, 1, se.store.clockReads())
				return
			}
			assert.Equal(t, keystore.StateSucceeded, rec.State)
			assert.Equal(t, 1, se.srv.AttemptsFor(orphan.Key))
			assert.Equal(t, int64(1), se.c.Stats().OrphansReclaimed)
			assert.Equal(t, int64(0), se.c.Stats().ClockSkewRefusals)
			assert.Equal(t, 2, se.store.clockReads(), "one per ClaimExpired batch")
		})
	}
}

// A Do that finds a pending record of another instance (its lease expired by the client's
// clock, or released: the key's age is judged by that clock too) does not take it over when
// its clock is off: ErrClockSkew, outcome unknown, nothing sent, the record untouched. With
// agreeing clocks it claims and sends; its own record it resumes without reading the store's
// clock.
func TestDoTakeoverClockSkew(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ahead     time.Duration
		owner     string        // the record's lease holder ("" released)
		leaseLeft time.Duration // its lease expiry from the store's now
		refused   bool
		reads     int // the write check before resuming, then the takeover check
	}{
		{"live lease, client 80h ahead", 80 * time.Hour, "instance-b", 20 * time.Second, true, 1},
		{"live lease, client 40s ahead", 40 * time.Second, "instance-b", 20 * time.Second, true, 1},
		{"expired lease, clocks agree", 0, "instance-b", -time.Minute, false, 2},
		{"released, client 80h ahead", 80 * time.Hour, "", 0, true, 1},
		{"released, client 1h behind", -time.Hour, "", 0, true, 1},
		{"released, clocks agree", 0, "", 0, false, 2},
		// Resuming our own record writes our clock's times too: refused as well.
		{"own record, client 80h ahead", 80 * time.Hour, "instance-a", -time.Minute, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			se := newSkewEnv(t, tc.ahead, nil)
			op := payment(100, "order-9", WithIntent("order-9"))
			writer := se.store.now // the other instance's clock agrees with the store's
			if tc.owner == "instance-a" {
				writer = se.clock.Now() // our own record: written by our clock
			}
			rec := newPendingRecord(op.Key(), 100, "order-9", writer.Add(-time.Minute))
			rec.Intent, rec.Fence = "order-9", 1
			if tc.owner != "" {
				rec.Owner, rec.LeaseUntil = tc.owner, writer.Add(tc.leaseLeft)
			}
			require.NoError(t, se.store.Create(context.Background(), rec))

			res, err := se.c.Do(context.Background(), op)
			assert.Equal(t, tc.reads, se.store.clockReads())
			if !tc.refused {
				require.NoError(t, err)
				assert.Equal(t, 1, se.srv.AttemptsFor(op.Key()))
				assert.Equal(t, op.Key(), res.Key)
				assert.Equal(t, keystore.StateSucceeded, se.record(op.Key()).State)
				assert.Equal(t, int64(0), se.c.Stats().ClockSkewRefusals)
				return
			}
			require.ErrorIs(t, err, ErrClockSkew)
			require.ErrorIs(t, err, ErrOutcomeUnknown)
			oe := opErr(t, err)
			assert.Equal(t, op.Key(), oe.Key)
			assert.Equal(t, "order-9", oe.Intent)
			assert.Equal(t, 0, oe.Attempts)
			var ce *ClockSkewError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, "record written with this clock", ce.Op, "refused before the takeover is even judged")
			assert.Equal(t, tc.ahead, ce.Skew)
			assert.Equal(t, 0, se.srv.Stats().Requests, "nothing sent")
			got := se.record(op.Key())
			assert.Equal(t, rec.Owner, got.Owner)
			assert.Equal(t, rec.LeaseUntil, got.LeaseUntil)
			assert.Equal(t, int64(1), got.Fence)
			assert.Equal(t, keystore.StatePending, got.State)
			assert.Equal(t, 0, got.Attempts)
			assert.Equal(t, int64(1), se.c.Stats().ClockSkewRefusals)
			ev := se.events()
			require.Len(t, ev, 1)
			assert.Equal(t, op.Key(), ev[0].Key)
			assert.Equal(t, "order-9", ev[0].Intent)
		})
	}
}

// The hot path reads the store's clock at most once a minute (clockRecheck), not per call:
// a new record, a 503 and a resend under a renewed lease, a success, then more calls.
func TestHotPathReadsStoreClockOncePerMinute(t *testing.T) {
	se := newSkewEnv(t, 0, nil)
	se.srv.Script(idemtest.Fault503)
	res, err := se.c.Do(context.Background(), payment(100, "order-1", WithIntent("order-1")))
	require.NoError(t, err)
	assert.Equal(t, 2, res.Attempts)
	assert.Equal(t, 1, se.store.clockReads())
	for i := range 5 {
		_, err := se.c.Do(context.Background(), payment(100, "order-x", WithIntent(fmt.Sprint("order-x", i))))
		require.NoError(t, err)
	}
	assert.Equal(t, 1, se.store.clockReads(), "cached for a minute of real time")
	assert.Equal(t, int64(0), se.c.Stats().ClockSkewRefusals)
}

// A clock that steps within the minute a write-path check stands is checked again at once:
// before, a step back of 100 hours stamped the call's records 100 hours old, a healthy
// instance's purge deleted them, and the next Do of the intent paid again under a new key.
// A slew within maxClockStep keeps the cached check.
func TestClockStepWithinTheCheckWindowIsChecked(t *testing.T) {
	se := newSkewEnv(t, 0, nil)
	_, err := se.c.Do(context.Background(), payment(100, "order-1", WithIntent("order-1")))
	require.NoError(t, err)
	require.Equal(t, 1, se.store.clockReads())

	se.clock.Advance(500 * time.Millisecond) // a slew: within maxClockStep of the real time passed
	se.store.mu.Lock()
	se.store.now = se.store.now.Add(500 * time.Millisecond)
	se.store.mu.Unlock()
	_, err = se.c.Do(context.Background(), payment(100, "order-2", WithIntent("order-2")))
	require.NoError(t, err)
	assert.Equal(t, 1, se.store.clockReads(), "no step: the cached check stands")

	se.clock.Advance(-100 * time.Hour) // the host's clock steps back; the store's does not
	op := payment(100, "order-3", WithIntent("order-3"))
	_, err = se.c.Do(context.Background(), op)
	require.ErrorIs(t, err, ErrClockSkew, "checked again at once, and refused")
	assert.Equal(t, 2, se.store.clockReads())
	_, err = se.store.GetByIntent(context.Background(), "", "order-3")
	assert.ErrorIs(t, err, keystore.ErrNotFound, "no record written with the stepped clock")
	assert.Equal(t, 2, se.srv.Stats().Requests, "order-3 was not sent")
}

// A clock that steps forward during the store's clock read: the interval [before, after]
// then holds any store time, and the check passed, after which Recover purged with the
// stepped clock records finished moments ago (another instance paid their intents again).
// The step is seen (the clock moved further than the monotonic clock) and the clock in force
// after it is judged: refused, nothing purged. The same for the write path's cached check.
func TestClockStepDuringTheCheckIsJudged(t *testing.T) {
	se := newSkewEnv(t, 0, nil)
	_, err := se.c.Do(context.Background(), payment(100, "order-1", WithIntent("order-1")))
	require.NoError(t, err) // a finished record, fresh by the store's clock

	se.store.mu.Lock()
	se.store.during = func() { se.clock.Advance(100 * time.Hour); se.store.during = nil }
	se.store.mu.Unlock()
	rep, err := se.c.Recover(context.Background(), nil)
	require.ErrorIs(t, err, ErrClockSkew)
	var ce *ClockSkewError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, 100*time.Hour, ce.Skew.Round(time.Hour))
	assert.Zero(t, rep.Purged)
	_, err = se.store.GetByIntent(context.Background(), "", "order-1")
	assert.NoError(t, err, "the finished record is kept")

	// The write path: a fresh client whose first check sees the step.
	se2 := newSkewEnv(t, 0, nil)
	se2.store.mu.Lock()
	se2.store.during = func() { se2.clock.Advance(100 * time.Hour); se2.store.during = nil }
	se2.store.mu.Unlock()
	_, err = se2.c.Do(context.Background(), payment(100, "order-2", WithIntent("order-2")))
	require.ErrorIs(t, err, ErrClockSkew, "not cached as a pass")
	assert.Equal(t, 0, se2.srv.Stats().Requests)
}

// NTP steps a clock that was 10 s ahead back to the store's time during the check's read: the
// clock after the read (right) is judged, not the one before it (10 s ahead). Before, the
// refusal was cached and every Do of the next minute refused with a synchronised clock.
func TestClockStepBackDuringTheCheckIsNotARefusal(t *testing.T) {
	se := newSkewEnv(t, 10*time.Second, nil) // this client 10 s ahead of the store
	se.store.mu.Lock()
	se.store.during = func() { se.clock.Advance(-10 * time.Second); se.store.during = nil }
	se.store.mu.Unlock()
	_, err := se.c.Do(context.Background(), payment(100, "order-1", WithIntent("order-1")))
	require.NoError(t, err, "the clock after the read agrees with the store's")
	_, err = se.c.Do(context.Background(), payment(100, "order-2", WithIntent("order-2")))
	require.NoError(t, err)
	assert.Equal(t, int64(0), se.c.Stats().ClockSkewRefusals)
}

// An instance whose clock is off writes no record at all: its times would mislead the others
// (a clock days behind has its finished records purged at once by a healthy instance, and the
// next Do of the intent mints a new key; one ahead holds leases for days). Nothing is sent, and
// the refusal is cached like a pass.
func TestWriteRefusedWhenClockOff(t *testing.T) {
	for _, ahead := range []time.Duration{96 * time.Hour, -96 * time.Hour, 6 * time.Second} {
		t.Run(ahead.String(), func(t *testing.T) {
			se := newSkewEnv(t, ahead, nil)
			op := payment(100, "order-1", WithIntent("order-1"))
			for range 2 {
				_, err := se.c.Do(context.Background(), op)
				require.ErrorIs(t, err, ErrClockSkew)
				assert.NotErrorIs(t, err, ErrOutcomeUnknown, "nothing was sent")
				var ce *ClockSkewError
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, "record written with this clock", ce.Op)
				assert.Equal(t, ahead, ce.Skew)
			}
			assert.Equal(t, 1, se.store.clockReads())
			assert.Equal(t, 0, se.srv.Stats().Requests)
			_, err := se.store.GetByIntent(context.Background(), "", "order-1")
			assert.ErrorIs(t, err, keystore.ErrNotFound, "no record written")
			assert.Equal(t, int64(1), se.c.Stats().ClockSkewRefusals)
		})
	}
}

// A verdict on a manual record is written with this clock too (UpdatedAt): far behind, the
// record would look past Retention to every other instance, be purged, and its intent be paid
// again under a new key. Resolve and the business lookup refuse it; the record stays manual.
func TestSettleRefusedWhenClockOff(t *testing.T) {
	for _, path := range []string{"Resolve", "lookup"} {
		t.Run(path, func(t *testing.T) {
			se := newSkewEnv(t, -80*time.Hour, func(c *Config) {
				c.Lookup = func(context.Context, LookupRequest) (Resolution, error) {
					return Resolution{Verdict: VerdictExecuted, Response: &keystore.Response{StatusCode: 201}}, nil
				}
			})
			ctx := context.Background()
			rec := newPendingRecord("k-manual", 100, "order-m", se.store.now.Add(-time.Hour))
			rec.Intent, rec.State, rec.Reason, rec.LastStatusCode = "order-m", keystore.StateManual, keystore.ReasonStoredServerError, 500
			require.NoError(t, se.store.Create(ctx, rec))
			var err error
			if path == "Resolve" {
				_, err = se.c.Resolve(ctx, "", "k-manual", Resolution{Verdict: VerdictExecuted, Note: "ops"})
				require.ErrorIs(t, err, ErrClockSkew)
			} else {
				_, err = se.c.Do(ctx, payment(100, "order-m", WithIntent("order-m")))
				require.ErrorIs(t, err, ErrStoredServerError, "the record stays manual, the lookup's verdict unwritten")
			}
			got, gerr := se.store.Get(ctx, "", "k-manual")
			require.NoError(t, gerr)
			assert.Equal(t, keystore.StateManual, got.State)
			assert.True(t, got.UpdatedAt.Equal(rec.UpdatedAt), "UpdatedAt unchanged")
			assert.Equal(t, 0, se.srv.Stats().Requests)
		})
	}
}

// A negative MaxClockSkew turns the check off (tests with injected clocks); a store whose
// clock cannot be read refuses the operation with the store's error.
func TestClockCheckOffAndStoreError(t *testing.T) {
	se := newSkewEnv(t, 80*time.Hour, func(c *Config) { c.Fleet.MaxClockSkew = -1 })
	old, _, _ := se.seed(t)
	rep, err := se.c.Recover(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, 2, rep.Purged, "off: both records are past Retention by the client's clock")
	assert.False(t, se.exists(t, old.Key))
	assert.Equal(t, 0, se.store.clockReads())

	se = newSkewEnv(t, 0, nil)
	old, _, _ = se.seed(t)
	down := errors.New("connection refused")
	se.store.err = down
	_, err = se.c.Recover(context.Background(), nil)
	require.ErrorIs(t, err, down)
	assert.NotErrorIs(t, err, ErrClockSkew)
	assert.True(t, se.exists(t, old.Key))
	assert.Equal(t, int64(0), se.c.Stats().ClockSkewRefusals)
}

// MaxClockSkew defaults to DefaultMaxClockSkew capped at LeaseTTL/3; beyond LeaseTTL/3 it is
// ErrInvalidConfig.
func TestMaxClockSkewConfig(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		want  time.Duration
		valid bool
	}{
		{"default", Config{}, DefaultMaxClockSkew, true},
		{"capped by a short lease", Config{Fleet: FleetConfig{LeaseTTL: 12 * time.Second}, Policy: Policy{AttemptTimeout: time.Second}}, 4 * time.Second, true},
		{"explicit", Config{Fleet: FleetConfig{MaxClockSkew: time.Second}}, time.Second, true},
		{"LeaseTTL/3", Config{Fleet: FleetConfig{MaxClockSkew: 10 * time.Second}}, 10 * time.Second, true},
		{"off", Config{Fleet: FleetConfig{MaxClockSkew: -1}}, -1, true},
		{"beyond LeaseTTL/3", Config{Fleet: FleetConfig{MaxClockSkew: 10*time.Second + 1}}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.BaseURL = "http://127.0.0.1:1"
			c, err := NewClient(tc.cfg)
			if !tc.valid {
				require.ErrorIs(t, err, ErrInvalidConfig)
				assert.Contains(t, err.Error(), "MaxClockSkew")
				return
			}
			require.NoError(t, err)
			defer c.Close()
			assert.Equal(t, tc.want, c.cfg.Fleet.MaxClockSkew)
		})
	}
}
