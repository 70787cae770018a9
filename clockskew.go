package idem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/event"
	"github.com/idemkit/idem/keystore"
)

// Leases and retention are compared with the caller's clock (keystore.Lease), so in a fleet
// sharing one store an instance whose clock is ahead would purge the others' fresh records
// (a later Do of the same intent would mint a new key: a double charge) and take over their
// live leases. When the store has an authoritative clock (keystore.Clock), the client checks
// its own against it before every operation that acts on other instances' records on the
// strength of its clock, and refuses beyond Config.Fleet.MaxClockSkew. Do checks too before it
// writes a record with its clock's times (creating or resuming one), but at most once a
// minute per Client (clockRecheck): renewing its own lease never checks.

// DefaultMaxClockSkew is Config.Fleet.MaxClockSkew when it is 0 (capped at LeaseTTL/3). NTP keeps
// hosts within milliseconds of each other, so 5 s never refuses a healthy fleet, even with a
// slow database round trip; and it is small beside what it protects: the default lease
// (30 s, renewed every 10 s, so a live lease always has 20 s left) and the retention (days).
const DefaultMaxClockSkew = 5 * time.Second

// ErrClockSkew: this client's clock (Config.Now) and the keystore's (keystore.Clock) differ by
// more than Config.Fleet.MaxClockSkew, so the client refused an operation that would act on other
// instances' records on the strength of its own clock: a retention purge, a claim of orphans
// (Recover, the background reclaimer), or a Do taking over a record whose lease another
// instance held. Nothing was done; the error is a *ClockSkewError (inside an *OperationError
// for Do). Fix the host's time synchronisation (NTP); nothing in the keystore needs repair.
var ErrClockSkew = errors.New("idem: clock differs from the keystore's")

// ClockSkewError reports a refused operation. It matches ErrClockSkew with errors.Is.
type ClockSkewError struct {
	Op    string        // what was refused: "retention purge", "orphan claim", "takeover of another instance's record"
	Local time.Time     // this client's clock (Config.Now) when the store's was read
	Store time.Time     // the keystore's clock
	Skew  time.Duration // Local - Store: positive when this client is ahead
	Max   time.Duration // Config.Fleet.MaxClockSkew
}

// Error names the operation, both clocks and the skew.
func (e *ClockSkewError) Error() string {
	dir, d := "ahead of", e.Skew
	if d < 0 {
		dir, d = "behind", -d
	}
	return fmt.Sprintf("idem: %s refused: this client's clock %s is %s %s the keystore's %s (MaxClockSkew %s); fix the host's time synchronisation (NTP)",
		e.Op, e.Local.Format(time.RFC3339Nano), d, dir, e.Store.Format(time.RFC3339Nano), e.Max)
}

// Is makes errors.Is(err, ErrClockSkew) true.
func (e *ClockSkewError) Is(target error) bool { return target == ErrClockSkew }

// The operations checkClock guards, as named in ClockSkewError.Op.
const (
	opPurge    = "retention purge"
	opReclaim  = "orphan claim"
	opTakeover = "takeover of another instance's record"
	opWrite    = "record written with this clock"
)

// clockRecheck is how long a write-path clock check stands before Do reads the store's clock
// again. The records a call writes carry this clock's CreatedAt, UpdatedAt and LeaseUntil,
// which the other instances judge with theirs (retention purge, KeyTTL, lease expiry): a
// clock days behind would have its finished records purged at once by a healthy instance
// (the next Do of the intent then mints a new key), one ahead would hold leases for days. So
// Do checks too, but at most once per clockRecheck per Client: one store round trip a
// minute, not one per call; and at once when this clock has stepped since the last check
// (writeClock.fresh), since a step back of days within that minute would otherwise stamp
// the call's records days old, and a healthy instance's purge would delete them.
const clockRecheck = time.Minute

// maxClockStep is how far Config.Now may move against the monotonic clock between two
// write-path checks before the cached check stops standing: at most a second (NTP slews
// far less than that in a minute), and at most half of MaxClockSkew.
func maxClockStep(maxSkew time.Duration) time.Duration { return min(time.Second, maxSkew/2) }

// writeClock caches the last write-path check (see clockRecheck). Calls read last without a
// lock; only the one that finds it stale takes mu and reads the store's clock.
type writeClock struct {
	mu   sync.Mutex
	last atomic.Pointer[clockCheck]
}

type clockCheck struct {
	at   time.Time // when it was checked, by the local monotonic clock
	wall time.Time // Config.Now then, without its monotonic reading
	err  error     // its outcome
}

// fresh returns the cached check while it stands, nil once it is stale, was never made, or
// Config.Now (now) has moved more than maxStep against the monotonic clock since: a step.
func (w *writeClock) fresh(now time.Time, maxStep time.Duration) *clockCheck {
	l := w.last.Load()
	if l == nil {
		return nil
	}
	elapsed := time.Since(l.at)
	if step := now.Round(0).Sub(l.wall) - elapsed; elapsed >= clockRecheck || step > maxStep || step < -maxStep {
		return nil
	}
	return l
}

// checkWriteClock is checkClock for Do's own writes, cached for clockRecheck. rec is the
// record about to be resumed, for the event; nil before a create.
func (c *Client) checkWriteClock(ctx context.Context, rec *keystore.Record) error {
	if _, ok := c.store.(keystore.Clock); !ok || c.cfg.Fleet.MaxClockSkew < 0 {
		return nil
	}
	w, maxStep := &c.writeClock, maxClockStep(c.cfg.Fleet.MaxClockSkew)
	if l := w.fresh(c.cfg.Now(), maxStep); l != nil {
		return l.err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if l := w.fresh(c.cfg.Now(), maxStep); l != nil { // another call checked while we waited
		return l.err
	}
	now, mono, err := c.checkClockAt(ctx, opWrite, rec)
	if err != nil && !errors.Is(err, ErrClockSkew) {
		return err // the store could not be read: not cached, the create will tell
	}
	// The instant checked, on both clocks: a step after it is measured from there.
	w.last.Store(&clockCheck{at: mono, wall: now.Round(0), err: err})
	return err
}

// skewDefaults fills and checks MaxClockSkew; LeaseTTL is already set.
func (c *Client) skewDefaults() error {
	cfg := &c.cfg
	limit := cfg.Fleet.LeaseTTL / 3
	switch {
	case cfg.Fleet.MaxClockSkew == 0:
		cfg.Fleet.MaxClockSkew = min(DefaultMaxClockSkew, limit)
	case cfg.Fleet.MaxClockSkew > limit:
		return fmt.Errorf("%w: MaxClockSkew %s is longer than LeaseTTL/3 (%s): an instance that far ahead could take over leases its holder is still renewing",
			ErrInvalidConfig, cfg.Fleet.MaxClockSkew, limit)
	}
	return nil
}

// checkClock compares Config.Now with the store's clock before op, when the store has one
// (keystore.Clock) and the check is on. rec is the record a takeover would claim, nil
// otherwise. It returns a *ClockSkewError (counted, logged, Hooks.OnClockSkew) beyond
// MaxClockSkew, the store's error if its clock cannot be read, else nil.
func (c *Client) checkClock(ctx context.Context, op string, rec *keystore.Record) error {
	_, _, err := c.checkClockAt(ctx, op, rec)
	return err
}

// checkClockAt is checkClock that also returns the instant checked: Config.Now as the
// check ended (the time to act on, such as a purge's cutoff) and the monotonic clock then.
// Without a store clock (or with the check off), they are read at once and err is nil.
func (c *Client) checkClockAt(ctx context.Context, op string, rec *keystore.Record) (now, mono time.Time, err error) {
	sc, ok := c.store.(keystore.Clock)
	if !ok || c.cfg.Fleet.MaxClockSkew < 0 {
		return c.cfg.Now(), time.Now(), nil
	}
	start := time.Now()
	before := c.cfg.Now()
	store, err := sc.Now(ctx)
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("idem: reading the keystore's clock before a %s: %w", op, err)
	}
	after := c.cfg.Now()
	mono = time.Now()
	// The store read its clock at some local instant in [before, after]: measure from the
	// nearer end, so that a slow round trip never counts as skew. Unless this clock stepped
	// during the read (it moved further than the monotonic clock, either way): forward, the
	// interval would hold any store time; back, the time before it is no longer this clock's.
	// The clock in force now, after, is what is judged.
	local, skew := before, time.Duration(0)
	step := after.Round(0).Sub(before.Round(0)) - mono.Sub(start)
	stepped := step > maxClockStep(c.cfg.Fleet.MaxClockSkew) || step < -maxClockStep(c.cfg.Fleet.MaxClockSkew)
	switch {
	case stepped:
		local, skew = after, after.Sub(store)
	case store.Before(before):
		skew = before.Sub(store)
	case store.After(after):
		local, skew = after, after.Sub(store)
	}
	if skew <= c.cfg.Fleet.MaxClockSkew && skew >= -c.cfg.Fleet.MaxClockSkew {
		return after, mono, nil
	}
	e := &ClockSkewError{Op: op, Local: local, Store: store, Skew: skew, Max: c.cfg.Fleet.MaxClockSkew}
	c.stats.clockSkew.Add(1)
	ev := event.ClockSkew{Event: event.Event{Time: local}, Err: e}
	if rec != nil {
		ev.Key, ev.Scope, ev.Intent = rec.Key, rec.Scope, rec.Intent
	}
	if l := c.cfg.Logger; l != nil {
		l.Error("idem clock differs from the keystore's; operation refused", "op", op, "key", ev.Key,
			"local", local, "store", store, "skew", skew, "max", c.cfg.Fleet.MaxClockSkew)
	}
	if h := c.cfg.Hooks.OnClockSkew; h != nil {
		h(ev)
	}
	return after, mono, e
}

// takesOver reports whether claiming rec acts on another instance's record on the strength
// of this client's clock: the holder's lease expired by this clock only, and the key's age,
// judged against KeyTTL before a resend, runs from a CreatedAt another clock wrote (a clock
// behind would resend a key the server may have forgotten). Our own records, and a dead
// owner's on an exclusive store (one process, one clock), are claimed without a check.
func (c *Client) takesOver(rec *keystore.Record) bool {
	return rec.Owner != c.cfg.Fleet.Owner && !c.deadOwner(rec)
}
