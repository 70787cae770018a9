package idemserver

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Scope names one key: the same key under another tenant or operation is another record.
type Scope struct {
	Tenant    string // from Config.Tenant, the authenticated caller
	Operation string // method and route, from Config.Operation
	Key       string // the idempotency key, unquoted
}

// State is the state of a stored key.
type State int

const (
	// StateProcessing: a request holds the key and is executing.
	StateProcessing State = iota + 1
	// StateCompleted: the first answer is stored; requests with the key replay it.
	StateCompleted
)

// Response is a stored answer: status, the allow-listed headers and the body bytes.
type Response struct {
	StatusCode int         // the HTTP status written
	Header     http.Header // the allow-listed headers (Config.StoredHeaders)
	Body       []byte      // the body bytes, replayed byte for byte
}

// Record is what a backend holds for a key.
type Record struct {
	Fingerprint   []byte    // nil for a processing record whose claim is not committed yet (pgserver)
	State         State     // processing or completed
	Response      *Response // set when StateCompleted
	RecoveryPoint string    // the last Checkpoint of a processing record, "" before any
	CreatedAt     time.Time // when the key was first claimed
	LockedUntil   time.Time // a processing record may be taken over after this instant
	ExpiresAt     time.Time // a completed record is forgotten after this instant
}

// ErrNotOwner is returned by a Claim whose key was taken over or released meanwhile: its
// answer is not stored.
var ErrNotOwner = errors.New("idemserver: claim is no longer held")

// ClaimRequest asks a backend to claim a key.
type ClaimRequest struct {
	Scope       Scope         // the tenant, operation and key to claim
	Fingerprint []byte        // the request's fingerprint (Config.Fingerprint), compared on reuse
	Now         time.Time     // the middleware's clock, for lock and expiry instants
	Lease       time.Duration // how long a checkpointed processing record stays locked
}

// Backend stores claims and answers. Implementations must be safe for concurrent use and pass
// servertest.Run.
type Backend interface {
	// Claim takes the key for the caller and returns its Claim, or returns the live record
	// that prevents it (nil Claim). Rules, in order:
	//   - no record, or a completed record whose ExpiresAt <= Now (Claim.ExpiredReuse true):
	//     claimed;
	//   - a record with another fingerprint: returned, not claimed (a backend that cannot
	//     see the fingerprint of an uncommitted claim returns it as processing with a nil
	//     Fingerprint: 409 now, 422 once it is stored);
	//   - a completed record: returned (replay);
	//   - a processing record held by a live request: returned (in progress);
	//   - a processing record whose owner is gone and LockedUntil <= Now: claimed again
	//     (Claim.RecoveryPoint tells where the previous owner stopped), with LockedUntil =
	//     Now + Lease kept even if this claim is then released or its owner dies: the next
	//     takeover waits for that lease too.
	Claim(ctx context.Context, req ClaimRequest) (Claim, *Record, error)
	// Lookup returns the live record of a key, or nil when there is none (never claimed,
	// released, or expired at now). A key held by a request in flight is StateProcessing.
	Lookup(ctx context.Context, s Scope, now time.Time) (*Record, error)
	// Purge deletes at most limit completed records whose ExpiresAt <= now and returns how
	// many it deleted.
	Purge(ctx context.Context, now time.Time, limit int) (int, error)
}

// Claim is a key held by one request.
type Claim interface {
	// Context returns ctx carrying whatever the backend gives handlers (pgserver: the
	// transaction).
	Context(ctx context.Context) context.Context
	// RecoveryPoint is the last checkpoint a previous owner committed, "" for a fresh key.
	RecoveryPoint() string
	// ExpiredReuse reports that an expired completed record was replaced by this claim.
	ExpiredReuse() bool
	// Checkpoint durably records that the handler reached point (with pgserver, commits the
	// work so far and opens a new transaction). After it, the claim can no longer be
	// released as not executed. The middleware never passes an empty point ("" is a fresh
	// start to RecoveryPoint); a backend should refuse one with ErrEmptyRecoveryPoint, as
	// NewMemory's and pgserver's do.
	Checkpoint(ctx context.Context, point string, now time.Time, lease time.Duration) error
	// Complete stores resp as the key's answer, kept until expires (with pgserver, in the
	// same transaction as the handler's writes, then commits). resp is handed over: the
	// middleware builds it for this call and neither reads nor changes it afterwards, so a
	// backend may keep it as it is instead of copying it (NewMemory's encodes it into one
	// byte slice, which the collector need not scan). Errors:
	// ErrNotOwner, or the backend's; on error nothing of this claim's last phase is stored.
	Complete(ctx context.Context, resp *Response, now, expires time.Time) error
	// Release forgets the claim: the key is free again, unless a checkpoint was committed,
	// in which case the record stays processing and may be taken over after its lease
	// (with pgserver, rolls back the transaction).
	Release(ctx context.Context) error
}

// RollbackClaim is a Claim whose Release also undoes what the handler wrote since the last
// checkpoint (pgserver: the transaction the handler's writes share with the claim). When a
// handler panics after execution began, the middleware releases such a claim (the work is
// gone, the key may run again); any other claim is completed with a stored 500
// (ProblemHandlerFailed), because nothing undid what the handler did and running it again
// could execute the operation twice; if even that write fails (three tries), the claim is
// kept, never released. Likewise, when a finished handler's answer cannot be stored, such a
// claim's request gets 503 (nothing happened, retry), any other a 500 (effect unknown).
//
// A Backend that wraps another (metrics, tracing) must keep this method on the claims it
// returns: a wrapper embedding only Claim hides it, and a pgserver claim would then be
// completed after a panic, committing the handler's partial writes with the stored 500.
type RollbackClaim interface {
	Claim
	// RollsBack reports whether Release undoes the handler's writes of the current phase.
	RollsBack() bool
}

// rollsBack reports whether releasing c undoes the handler's work (RollbackClaim).
func rollsBack(c Claim) bool {
	rc, ok := c.(RollbackClaim)
	return ok && rc.RollsBack()
}

// lostRollback reports a RollbackClaim that can no longer roll back (pgserver, once the
// handler ended the claim's transaction itself): its writes may stand whatever the handler
// says.
func lostRollback(c Claim) bool {
	rc, ok := c.(RollbackClaim)
	return ok && !rc.RollsBack()
}
