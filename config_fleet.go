package idem

import "time"

// FleetConfig is the part of Config for a fleet of instances sharing one Store (see
// keystore.Lease and docs/FLEET.md). Every field's zero value is a working default, so a
// single process sets none of them.
type FleetConfig struct {
	// Owner identifies this client in a fleet of instances sharing one Store (see
	// keystore.Lease): every record it sends holds a lease under this id. It must be unique
	// per running Client; a restarted process must take a new one. Default: host name,
	// process id and 8 random bytes ("host/1234/9f86d081884c7d65"), new for every Client.
	Owner string
	// LeaseTTL is how long a claim on a record lasts without renewal. A call creates its
	// record already claimed (no extra write before the first byte), renews the lease every
	// LeaseTTL/3 while it runs and before every resend. When it ends with the record still
	// pending it keeps the lease for the wait the server asked (Retry-After) or the policy's
	// backoff, at most LeaseTTL, so that no reclaim pass resends it sooner (released at once
	// if the caller canceled or its deadline passed; this client's own Do or Recover takes it
	// at once). Another instance waits for a live lease and takes over the record
	// once it has expired, so a crashed instance's calls are continued after at most LeaseTTL.
	// It must be longer than Policy.AttemptTimeout (ErrInvalidConfig otherwise), so that an
	// attempt never outlives the lease it was sent under. Default 30 s, or three times
	// Policy.AttemptTimeout when that is longer (so a longer attempt timeout needs no LeaseTTL).
	LeaseTTL time.Duration
	// ReclaimInterval, if positive, makes the client take over orphaned records in the
	// background every interval: pending records whose lease expired or was released (an
	// instance died, or a call gave up), claimed in batches with keystore.Store.ClaimExpired
	// and reconciled as Recover does, with the default policy. A long-running service thus
	// finishes a dead peer's payments without a restart. Close stops it. Default 0: off (call
	// Recover yourself). Stats.OrphansReclaimed counts the records taken.
	ReclaimInterval time.Duration
	// MaxClockSkew bounds how far Now may be from the keystore's clock, when the store has
	// one (keystore.Clock: pgstore, shared by a fleet). Leases and retention are judged by
	// Now, so before every operation that acts on other instances' records on the strength
	// of this clock (a retention purge, in Recover or in the background; a claim of orphans,
	// in Recover or by the background reclaimer; a Do taking over a pending record of another
	// instance, whose lease it judges expired and whose key's age it judges against KeyTTL)
	// the client reads the store's clock, and beyond the bound refuses
	// with ErrClockSkew: Recover returns it, background passes count it
	// (Stats.ClockSkewRefusals) and report it (Logger, Hooks.OnClockSkew), a Do returns it
	// without sending. Do also refuses to create or resume a record (ErrClockSkew, nothing
	// written or sent), since the times it writes are judged by the others' clocks: that
	// check reads the store's clock at most once a minute per Client. Default DefaultMaxClockSkew (5 s), capped at LeaseTTL/3; a larger
	// value is ErrInvalidConfig. Negative disables the check (for tests with injected
	// clocks). Stores without a clock (Memory, bbolt: one process, one clock) are not
	// checked.
	MaxClockSkew time.Duration
}
