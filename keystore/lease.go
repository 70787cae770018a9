package keystore

import (
	"errors"
	"fmt"
	"time"
)

// The fleet contract: several instances (processes) share one store, and a lease with a
// fencing token makes one of them at a time the sender of a key.
//
//   - Claim takes the lease of one pending record: it succeeds when no other owner holds a live
//     lease, and gives the record a new, larger Fence.
//   - Renew extends the lease and Release ends it; both only for the holder of the current
//     Fence.
//   - Update is fenced: a write carrying a Fence other than the stored one is refused with
//     ErrFenced. A stale owner (its lease expired and another instance claimed the record)
//     therefore cannot overwrite the new owner's record, and learns that it must not send.
//   - ClaimExpired takes, atomically, up to limit pending records whose lease is not live: the
//     orphans of a dead instance. Concurrent callers never receive the same record.
//
// Time: every backend compares leases with the Now the caller passes (the caller's clock, so
// that tests can inject one). A lease is live at instant now when Owner is set and
// LeaseUntil is after now. The caller's clock therefore decides whose records it may take:
// an instance ahead of the others by more than the lease takes over live leases (and one
// ahead by more than the retention purges their fresh records, forgetting intents), and one
// behind writes leases the others already see as expired. Fencing keeps the record's writes
// safe, but not the requests sent meanwhile. Instances of a fleet must run NTP-synchronised
// clocks and use leases much longer than their skew; a shared store implements Clock so that
// the idem client can check its clock against the store's before it acts on other
// instances' records (Config.Fleet.MaxClockSkew) and refuse when they disagree.

// Lease is what a claim asks for: the claiming instance and the lease it wants.
type Lease struct {
	// Owner identifies the claiming instance; it must be non-empty and unique per process
	// (a restarted process takes a new one). Goroutines of one owner must serialise their
	// calls on one key themselves: a Claim by the holder replaces its own lease.
	Owner string
	// Now is the caller's current time; leases whose LeaseUntil is not after Now are expired.
	Now time.Time
	// Until is the LeaseUntil of the claimed record; it must be after Now.
	Until time.Time
}

// Validate returns an error wrapping ErrInvalid if l has no owner or Until is not after Now.
func (l Lease) Validate() error {
	switch {
	case l.Owner == "":
		return errors.Join(ErrInvalid, errors.New("lease without an owner"))
	case !l.Until.After(l.Now):
		return errors.Join(ErrInvalid, fmt.Errorf("lease until %v is not after now %v", l.Until, l.Now))
	}
	return nil
}

// Live reports whether rec holds a lease that is live at now: an Owner and a LeaseUntil
// after now.
func (r *Record) Live(now time.Time) bool {
	return r.Owner != "" && r.LeaseUntil.After(now)
}

// Claimable reports whether Claim by l.Owner succeeds on rec: rec is pending and no other
// owner holds a lease live at l.Now.
func Claimable(rec *Record, l Lease) bool {
	return rec.State == StatePending && (!rec.Live(l.Now) || rec.Owner == l.Owner)
}

// Orphaned reports whether ClaimExpired at now takes rec: rec is pending and holds no lease
// live at now (never claimed, released, or expired), whoever its owner was.
func Orphaned(rec *Record, now time.Time) bool {
	return rec.State == StatePending && !rec.Live(now)
}

// ApplyClaim gives rec the lease l and the next fencing token. Backends call it once they
// have checked Claimable or Orphaned under their lock.
func ApplyClaim(rec *Record, l Lease) {
	rec.Owner, rec.LeaseUntil, rec.Fence = l.Owner, l.Until, rec.Fence+1
}

// CheckHolder returns a *FencedError if (owner, fence) no longer holds rec: the stored Fence
// differs, or the stored Owner does (the lease was released). Renew and Release use it.
func CheckHolder(rec *Record, owner string, fence int64) error {
	if rec.Fence != fence || rec.Owner != owner {
		return &FencedError{Scope: rec.Scope, Key: rec.Key, Fence: fence, Current: rec.Fence, Owner: rec.Owner}
	}
	return nil
}

// CheckFence returns a *FencedError if next, a record given to Update, carries a Fence other
// than the stored one: someone claimed the record since next's writer read or claimed it.
func CheckFence(stored, next *Record) error {
	if stored.Fence != next.Fence {
		return &FencedError{Scope: stored.Scope, Key: stored.Key, Fence: next.Fence, Current: stored.Fence, Owner: stored.Owner}
	}
	return nil
}

// KeepLease copies the lease fields (Owner, LeaseUntil, Fence) of stored into next: Update
// writes the record's contents and leaves the lease as Claim, Renew and Release set it.
func KeepLease(next, stored *Record) {
	next.Owner, next.LeaseUntil, next.Fence = stored.Owner, stored.LeaseUntil, stored.Fence
}

// SameLease reports whether a and b hold the same lease fields.
func SameLease(a, b *Record) bool {
	return a.Owner == b.Owner && a.LeaseUntil.Equal(b.LeaseUntil) && a.Fence == b.Fence
}

var (
	// ErrClaimed: another owner holds a live lease on the record. The error is a
	// *ClaimedError naming the holder and the lease expiry.
	ErrClaimed = errors.New("keystore: record is claimed by another owner")
	// ErrFenced: the caller no longer holds the record's lease: another owner claimed it
	// (the stored Fence is larger) or it was released. The error is a *FencedError. A caller
	// that gets it must not send the request again: the new owner is responsible for it.
	ErrFenced = errors.New("keystore: lease lost to a newer claim (fenced)")
	// ErrNotPending: Claim of a record that is not pending; its outcome is already stored
	// (or awaits a person), so there is nothing to send.
	ErrNotPending = errors.New("keystore: record is not pending")
)

// ClaimedError is returned by Claim when another owner holds a live lease. It matches
// ErrClaimed with errors.Is.
type ClaimedError struct {
	Scope, Key string    // the claimed record
	Owner      string    // the holder
	Until      time.Time // its lease expiry: wait until then, or for the record to end
	Fence      int64     // the holder's fencing token
}

// Error names the record, the holder and its lease expiry.
func (e *ClaimedError) Error() string {
	return fmt.Sprintf("keystore: record (%q, %q) is claimed by %q until %s (fence %d)",
		e.Scope, e.Key, e.Owner, e.Until.Format(time.RFC3339Nano), e.Fence)
}

// Is makes errors.Is(err, ErrClaimed) true.
func (e *ClaimedError) Is(target error) bool { return target == ErrClaimed }

// FencedError is returned by Update, Renew and Release when the caller's fencing token is no
// longer the record's. It matches ErrFenced with errors.Is.
type FencedError struct {
	Scope, Key string // the record the write was for
	Fence      int64  // the token the caller presented
	Current    int64  // the stored token
	Owner      string // the current holder ("" if released or never claimed)
}

// Error names the record, the caller's fence and the current one.
func (e *FencedError) Error() string {
	return fmt.Sprintf("keystore: write to (%q, %q) with fence %d refused: fence is now %d, owner %q",
		e.Scope, e.Key, e.Fence, e.Current, e.Owner)
}

// Is makes errors.Is(err, ErrFenced) true.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// Released reports whether rec's lease was released at fence: no owner, the same Fence.
// Release of such a record succeeds without a change.
func Released(rec *Record, fence int64) bool { return rec.Owner == "" && rec.Fence == fence }

// CheckRenew returns an error wrapping ErrInvalid if Renew(owner, until) is malformed: an
// empty owner or a zero until.
func CheckRenew(owner string, until time.Time) error {
	switch {
	case owner == "":
		return errors.Join(ErrInvalid, errors.New("renew without an owner"))
	case until.IsZero():
		return errors.Join(ErrInvalid, errors.New("renew to a zero time"))
	}
	return nil
}

// CheckClaimExpired returns an error wrapping ErrInvalid if ClaimExpired(l, limit) is
// malformed: limit below 1 or l fails Validate.
func CheckClaimExpired(l Lease, limit int) error {
	if limit < 1 {
		return errors.Join(ErrInvalid, fmt.Errorf("claim limit %d is below 1", limit))
	}
	return l.Validate()
}

// ClaimRefusal returns why Claim by l may not take rec: an error wrapping ErrNotPending, or a
// *ClaimedError; nil if it may.
func ClaimRefusal(rec *Record, l Lease) error {
	if rec.State != StatePending {
		return errors.Join(ErrNotPending, errors.New("state "+string(rec.State)))
	}
	if !Claimable(rec, l) {
		return &ClaimedError{Scope: rec.Scope, Key: rec.Key, Owner: rec.Owner, Until: rec.LeaseUntil, Fence: rec.Fence}
	}
	return nil
}
