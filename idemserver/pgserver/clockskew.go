package pgserver

import (
	"errors"
	"fmt"
	"time"
)

// ErrClockSkew: the middleware's clock (idemserver.Config.Now) and the database's differ by
// more than Options.MaxClockSkew, so Claim, Lookup or Purge refused: nothing was claimed,
// executed or deleted. Under the middleware a refused claim answers 503 with Retry-After
// (an idemserver.EventStoreError whose Err matches ErrClockSkew), a refused status lookup
// 503, and Middleware.Purge returns the error. The error is a *ClockSkewError. Fix the host's
// time synchronisation (NTP); nothing in the database needs repair.
var ErrClockSkew = errors.New("pgserver: clock differs from the database's")

// ClockSkewError reports a refused operation. It matches ErrClockSkew with errors.Is.
type ClockSkewError struct {
	Op       string        // what was refused: "claim", "lookup" or "purge"
	Local    time.Time     // the middleware's clock, at the end of the window nearer to Database
	Database time.Time     // the database's clock_timestamp()
	Skew     time.Duration // Local - Database: positive when this server is ahead
	Max      time.Duration // Options.MaxClockSkew
}

// Error names the operation, both clocks and the skew.
func (e *ClockSkewError) Error() string {
	dir, d := "ahead of", e.Skew
	if d < 0 {
		dir, d = "behind", -d
	}
	return fmt.Sprintf("pgserver: %s refused: this server's clock %s is %s %s the database's %s (MaxClockSkew %s); fix the host's time synchronisation (NTP)",
		e.Op, e.Local.Format(time.RFC3339Nano), d, dir, e.Database.Format(time.RFC3339Nano), e.Max)
}

// Is makes errors.Is(err, ErrClockSkew) true.
func (e *ClockSkewError) Is(target error) bool { return target == ErrClockSkew }

// checkClock compares the database's clock db with the middleware's, which read some instant
// in [lo, hi] when the database read db (lo: the caller's now plus the local time elapsed
// until the statement was sent; hi: plus the time until its answer). Measuring from the
// nearer end means a slow round trip, or a wait for a pool connection, never counts as skew.
// It returns a *ClockSkewError beyond Options.MaxClockSkew, else nil (also when the check is
// off).
func (b *Backend) checkClock(op string, lo, hi, db time.Time) error {
	if b.maxSkew < 0 {
		return nil
	}
	local, skew := lo, time.Duration(0)
	switch {
	case db.Before(lo):
		skew = lo.Sub(db)
	case db.After(hi):
		local, skew = hi, hi.Sub(db)
	}
	if skew <= b.maxSkew && skew >= -b.maxSkew {
		return nil
	}
	return &ClockSkewError{Op: op, Local: local, Database: db, Skew: skew, Max: b.maxSkew}
}
