package idem

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
)

// A reclaim pass starts records at most every `every` while calls are in flight, in bursts
// of a millisecond's debt, and unpaced when none is; the pace never stops it.
// every is 250µs here: four starts a millisecond.
func TestPacerSpacesStartsWhileBusy(t *testing.T) {
	const every = 250 * time.Microsecond
	type step struct {
		busy    bool
		advance time.Duration // the clock moves this much before the start
		want    time.Duration // the delay asked for
	}
	busy := func(advance, want time.Duration) step { return step{true, advance, want} }
	tests := []struct {
		name  string
		steps []step
	}{
		{"idle: never waits", []step{{false, 0, 0}, {false, 0, 0}, {false, 0, 0}, {false, 0, 0}, {false, 0, 0}, {false, 0, 0}}},
		{"busy: a burst, then wait the debt", []step{
			// a pass starts with a millisecond of credit: eight starts free, the ninth owes 1ms
			busy(0, 0), busy(0, 0), busy(0, 0), busy(0, 0), busy(0, 0), busy(0, 0), busy(0, 0), busy(0, 0),
			busy(0, time.Millisecond),
			// slept exactly the debt: then four starts a millisecond, the pace
			busy(time.Millisecond, 0), busy(0, 0), busy(0, 0), busy(0, time.Millisecond),
			busy(time.Millisecond, 0), busy(0, 0), busy(0, 0), busy(0, time.Millisecond),
		}},
		{"busy and slower than the pace: no wait", []step{
			busy(0, 0), busy(every, 0), busy(every, 0), busy(every, 0), busy(every, 0), busy(every, 0),
			busy(every, 0), busy(every, 0), busy(every, 0), busy(every, 0), busy(every, 0)}},
		{"a late timer is made up", []step{
			busy(0, 0), busy(0, 0), busy(0, 0), busy(0, 0), busy(0, 0), busy(0, 0), busy(0, 0), busy(0, 0),
			busy(0, time.Millisecond),
			// woke 500µs late: two more starts before the next wait
			busy(1500*time.Microsecond, 0), busy(0, 0), busy(0, 0), busy(0, 0), busy(0, 0), busy(0, time.Millisecond)}},
		{"a long pause earns a millisecond at most", []step{
			busy(0, 0), busy(time.Second, 0), busy(0, 0), busy(0, 0), busy(0, 0), busy(0, 0), busy(0, 0),
			busy(0, 0), busy(0, 0), busy(0, time.Millisecond)}},
		{"idle clears the debt", []step{
			busy(0, 0), busy(0, 0), busy(0, 0), busy(0, 0), busy(0, 0), busy(0, 0), busy(0, 0), busy(0, 0),
			{false, 0, 0}, // the ninth start would have owed 1ms
			busy(0, 0), busy(0, 0), busy(0, 0), busy(0, 0), busy(0, time.Millisecond)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Unix(1_700_000_000, 0)
			var isBusy bool
			p := &pacer{every: every, busy: func() bool { return isBusy }, now: func() time.Time { return now }}
			for i, s := range tt.steps {
				now = now.Add(s.advance)
				isBusy = s.busy
				assert.Equal(t, s.want, p.delay(), "start %d", i)
			}
		})
	}
}

// Over a long busy run the starts come at the pace, sleeping only in waits of a millisecond
// or more; the same run with no call in flight never sleeps.
func TestPacerRate(t *testing.T) {
	for _, busy := range []bool{true, false} {
		now := time.Unix(1_700_000_000, 0)
		p := &pacer{every: time.Second / defaultRecoverBusyRate, busy: func() bool { return busy }, now: func() time.Time { return now }}
		start, waits := now, 0
		const n = 10 * defaultRecoverBusyRate
		for range n {
			d := p.delay()
			if d > 0 {
				require.GreaterOrEqual(t, d, reclaimPaceMin)
				waits++
				now = now.Add(d + 100*time.Microsecond) // a timer wakes late
			}
		}
		took := now.Sub(start)
		if !busy {
			assert.Zero(t, took)
			assert.Zero(t, waits)
			continue
		}
		// n starts at defaultRecoverBusyRate per second take 10 s less one burst, the late
		// wakes made up
		assert.InDelta(t, 10*time.Second, took, float64(2*reclaimPaceMin), "took %v", took)
		assert.Greater(t, waits, n/20, "bursts of about a millisecond")
	}
}

// Calls in flight are the client's running calls beyond the pass's own.
func TestPacerBusyCountsLiveCalls(t *testing.T) {
	c, err := NewClient(Config{BaseURL: "http://127.0.0.1:1", Store: keystore.NewMemory()})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	background, recovering := c.newPacer(0), c.newPacer(1)
	assert.False(t, background.busy())
	c.enter() // Recover itself
	assert.True(t, background.busy())
	assert.False(t, recovering.busy())
	c.enter() // a Do
	assert.True(t, recovering.busy())
	c.exit()
	c.exit()
	assert.False(t, background.busy())
}

// Config.RecoverBusyRate sets the pace (records per second while busy); negative turns it off.
func TestPacerFollowsRecoverBusyRate(t *testing.T) {
	for _, tc := range []struct {
		rate      int
		every     time.Duration
		pacedBusy bool
	}{
		{0, time.Second / defaultRecoverBusyRate, true},
		{1000, time.Millisecond, true},
		{-1, time.Second, false},
	} {
		c, err := NewClient(Config{BaseURL: "http://127.0.0.1:1", Store: keystore.NewMemory(), RecoverBusyRate: tc.rate})
		require.NoError(t, err)
		p := c.newPacer(0)
		c.enter() // a Do in flight
		assert.Equal(t, tc.every, p.every, "rate %d", tc.rate)
		assert.Equal(t, tc.pacedBusy, p.busy(), "rate %d", tc.rate)
		c.exit()
		require.NoError(t, c.Close())
	}
}

// A rate too low for the batch a pass claims at once, against the lease the batch holds, is
// refused; at the edge it is accepted.
func TestRecoverBusyRateAgainstLease(t *testing.T) {
	// 16 × 8 = 128 records; a 30 s lease allows 3 s: at least 43 records/s (42 gives 3.05 s).
	for _, tc := range []struct {
		rate int
		ok   bool
	}{{43, true}, {42, false}, {1, false}, {-1, true}, {0, true}} {
		c, err := NewClient(Config{BaseURL: "http://127.0.0.1:1", Store: keystore.NewMemory(), RecoverBusyRate: tc.rate})
		if !tc.ok {
			require.ErrorIs(t, err, ErrInvalidConfig, "rate %d", tc.rate)
			assert.Contains(t, err.Error(), "RecoverBusyRate")
			continue
		}
		require.NoError(t, err, "rate %d", tc.rate)
		require.NoError(t, c.Close())
	}
}
