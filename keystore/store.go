// Package keystore holds the records idem persists for every operation: the idempotency key,
// the request fingerprint, the request itself (without credentials) and the final outcome.
//
// A record is written before the first byte of a request is sent, so that a process that dies
// mid-call can reconcile the operation after a restart instead of repeating or forgetting it.
// Backends: [Memory] (tests, short-lived processes), the bbolt file store in
// keystore/boltstore (one process), and the PostgreSQL store shared by a fleet of instances
// in the nested module keystore/pgstore. Every backend passes the conformance suite in
// keystore/keystoretest, the fleet contract (leases, fencing, orphan reclaim) included.
//
// This package never imports the root idem package.
package keystore

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// State is the lifecycle state of a record.
type State string

const (
	// StatePending: persisted, possibly sent, outcome not known yet. Recover reconciles it.
	// Pending records are never purged.
	StatePending State = "pending"
	// StateSucceeded: the server executed the operation; Response holds its answer.
	StateSucceeded State = "succeeded"
	// StateFailed: the operation ended with a permanent failure (validation, auth, key
	// conflict, or a server answer that must not be retried). Error holds the reason.
	StateFailed State = "failed"
	// StateManual: the outcome cannot be learned from the key and it is never resent: the key
	// is past the server's retention window, or the server stored a 5xx for it (execution
	// began, effect unknown). A business lookup or a person reconciles it. Never purged.
	StateManual State = "manual"
)

// Terminal reports whether s is a final state that a retention purge may remove
// (succeeded or failed). Pending and manual records are kept until resolved.
func (s State) Terminal() bool { return s == StateSucceeded || s == StateFailed }

// Valid reports whether s is one of the defined states.
func (s State) Valid() bool {
	switch s {
	case StatePending, StateSucceeded, StateFailed, StateManual:
		return true
	}
	return false
}

// Request is the persisted copy of an operation's request. Credential headers are stripped
// before it is stored (see [StripSecrets]); the client re-applies them when it sends.
type Request struct {
	Method string      `json:"method"`           // the HTTP method, such as "POST"
	URL    string      `json:"url"`              // relative to the client's base URL, e.g. "/v1/payments"
	Header http.Header `json:"header,omitempty"` // the request's headers, credentials stripped
	Body   []byte      `json:"body,omitempty"`   // exact bytes sent on every attempt
}

// Response is the persisted final answer of a succeeded (or permanently failed) operation.
type Response struct {
	StatusCode int         `json:"status"`           // the HTTP status
	Header     http.Header `json:"header,omitempty"` // Set-Cookie stripped (ResponseSecretHeaders)
	Body       []byte      `json:"body,omitempty"`   // the body bytes as received
}

// Record is everything idem knows about one operation. (Scope, Key) is unique; so is
// (Scope, Intent) when Intent is not empty.
type Record struct {
	Scope       string  `json:"scope"`            // tenant; "" is a valid scope
	Key         string  `json:"key"`              // the idempotency key sent on every attempt
	Intent      string  `json:"intent,omitempty"` // caller-named intent such as an order id
	Fingerprint string  `json:"fingerprint"`      // hex SHA-256 of method, path and body
	Request     Request `json:"request"`          // what is sent on every attempt
	State       State   `json:"state"`            // pending, succeeded, failed or manual
	// Attempts counts the requests sent to the server whose end the client recorded. A
	// process that stopped during an attempt leaves that attempt uncounted, so a pending
	// record with 0 attempts may still have reached the server (its outcome is unknown until
	// reconciled), and a record Recover settled through the status endpoint may say 0.
	Attempts       int    `json:"attempts"`
	LastStatusCode int    `json:"last_status,omitempty"` // HTTP status of the last answer, 0 if none
	Reason         string `json:"reason,omitempty"`      // machine-readable stop reason, set by the client
	// NotExecuted is true only when the last call on a pending record ended knowing that the
	// server has not executed the key (every attempt unsent, or answered 429/503, or the
	// status endpoint said not found). A crash mid-call leaves it false, so recovery asks the
	// status endpoint before resending; the client clears it durably before it sends again.
	NotExecuted bool      `json:"not_executed,omitempty"`
	Error       string    `json:"error,omitempty"`    // why it failed or is still unknown
	Response    *Response `json:"response,omitempty"` // set when the server answered finally
	CreatedAt   time.Time `json:"created_at"`         // when the key was persisted
	UpdatedAt   time.Time `json:"updated_at"`         // last write

	// The lease (see Lease and the fleet methods of Store). Owner is the instance that holds
	// or last held the record's lease, "" if none; LeaseUntil is when that lease expires,
	// zero if none. Fence is the fencing token: 0 until the first claim, then incremented by
	// every Claim and ClaimExpired. Update is refused with ErrFenced unless the record it is
	// given carries the stored Fence, and it never changes these three fields; Create stores
	// them as given, so that a record can be created already claimed (Fence 1, say).
	Owner      string    `json:"owner,omitempty"`
	LeaseUntil time.Time `json:"lease_until,omitzero"` // Owner's lease expiry, zero if none (Live)
	Fence      int64     `json:"fence,omitempty"`      // fencing token: 0, then +1 per claim

	// Note is free text kept from a reconciliation: who resolved a manual record and on what
	// evidence (a business lookup's answer, an operator's ticket).
	Note string `json:"note,omitempty"`
}

// Clone returns a deep copy, so that a backend never shares memory with its callers.
func (r *Record) Clone() *Record {
	if r == nil {
		return nil
	}
	c := *r
	c.Request.Header = r.Request.Header.Clone()
	c.Request.Body = cloneBytes(r.Request.Body)
	if r.Response != nil {
		resp := *r.Response
		resp.Header = r.Response.Header.Clone()
		resp.Body = cloneBytes(r.Response.Body)
		c.Response = &resp
	}
	return &c
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

// Validate reports whether the record can be stored: a non-empty key, a valid state, a
// method, a Fence not below zero and no LeaseUntil without an Owner. Backends call it on
// Create and Update and return its error wrapped in ErrInvalid.
func (r *Record) Validate() error {
	switch {
	case r == nil:
		return errors.Join(ErrInvalid, errors.New("nil record"))
	case r.Key == "":
		return errors.Join(ErrInvalid, errors.New("empty key"))
	case !r.State.Valid():
		return errors.Join(ErrInvalid, errors.New("unknown state "+string(r.State)))
	case r.Request.Method == "":
		return errors.Join(ErrInvalid, errors.New("empty request method"))
	case r.Fence < 0:
		return errors.Join(ErrInvalid, errors.New("negative fence"))
	case r.Owner == "" && !r.LeaseUntil.IsZero():
		return errors.Join(ErrInvalid, errors.New("lease expiry without an owner"))
	}
	return nil
}

// Store persists records. Implementations are safe for concurrent use. A write is durable
// when the call returns (for a file store: committed and fsynced).
//
// The fleet methods (Claim, Renew, Release, ClaimExpired) and the fenced Update are part of
// the contract of every backend, so that a wrapper or adapter cannot silently drop them: a
// store shared by several instances (keystore/pgstore) enforces them across processes, and
// the single-process stores (Memory, boltstore) enforce the same rules in one process. Lease
// operations never change UpdatedAt. See Lease for the time rules.
type Store interface {
	// Create stores a new record. It returns ErrExists if (Scope, Key) exists, or if
	// rec.Intent is set and another record in Scope has that intent; nothing is written then.
	Create(ctx context.Context, rec *Record) error
	// Get returns the record for (scope, key), or ErrNotFound.
	Get(ctx context.Context, scope, key string) (*Record, error)
	// GetByIntent returns the record persisted for (scope, intent), or ErrNotFound.
	GetByIntent(ctx context.Context, scope, intent string) (*Record, error)
	// Update replaces an existing record (matched by Scope and Key); ErrNotFound if absent.
	// Scope, Key, Intent and Fingerprint of the stored record must not change (ErrInvalid).
	// Update is fenced: if rec.Fence differs from the stored Fence it writes nothing and
	// returns a *FencedError (errors.Is ErrFenced). It keeps the stored Owner, LeaseUntil and
	// Fence whatever rec holds.
	Update(ctx context.Context, rec *Record) error
	// Claim gives l.Owner the lease of the pending record (scope, key) until l.Until, with the
	// next Fence, and returns the claimed record. It returns ErrInvalid if l fails Validate,
	// ErrNotFound if absent, an error wrapping ErrNotPending if the record is succeeded,
	// failed or manual, and a *ClaimedError (errors.Is ErrClaimed) if another owner holds a
	// lease live at l.Now; nothing changes then. The holder itself may claim again (new Fence).
	Claim(ctx context.Context, scope, key string, l Lease) (*Record, error)
	// Renew sets LeaseUntil to until if (owner, fence) still holds the lease: the stored
	// Owner and Fence equal them, whether or not the lease has expired meanwhile (nobody
	// claimed it). Otherwise it returns a *FencedError (errors.Is ErrFenced). ErrInvalid for
	// an empty owner or a zero until; ErrNotFound if absent. The state does not matter.
	Renew(ctx context.Context, scope, key, owner string, fence int64, until time.Time) error
	// Release ends the lease of (owner, fence): Owner "" and LeaseUntil zero, Fence kept, so
	// that ClaimExpired may take the record at once. It returns nil if the record is already
	// released at that fence, a *FencedError if another owner claimed it since, ErrInvalid for
	// an empty owner and ErrNotFound if absent.
	Release(ctx context.Context, scope, key, owner string, fence int64) error
	// ClaimExpired claims for l.Owner, as Claim does, up to limit pending records, in any
	// scope, that hold no lease live at l.Now (never claimed, released or expired), oldest
	// CreatedAt first (List order), and returns them claimed. Each record is claimed
	// atomically: concurrent callers never receive the same record (once claimed, it holds a
	// live lease until l.Until). Under contention a backend may return fewer than limit
	// while orphans remain (rows being claimed by others are skipped, not waited for). It
	// returns an empty slice if there is none, and ErrInvalid if l fails Validate or limit < 1.
	ClaimExpired(ctx context.Context, l Lease, limit int) ([]*Record, error)
	// List returns the records in any of the given states (all records if none is given),
	// oldest CreatedAt first.
	List(ctx context.Context, states ...State) ([]*Record, error)
	// Purge deletes terminal records (succeeded, failed) last updated before cutoff and
	// returns how many it deleted. Pending and manual records are never purged.
	Purge(ctx context.Context, cutoff time.Time) (int, error)
	// Close releases the store. Calls after Close return ErrClosed.
	Close() error
}

var (
	// ErrNotFound: no record for that key or intent.
	ErrNotFound = errors.New("keystore: record not found")
	// ErrStateChanged: UpdateFromState found the stored record in another state than the
	// one the write was conditional on (someone else changed it since it was read); nothing
	// was written.
	ErrStateChanged = errors.New("keystore: record state changed since it was read")
	// ErrExists: a record with that key (or intent) already exists in the scope.
	ErrExists = errors.New("keystore: record already exists")
	// ErrInvalid: the record cannot be stored as given (see Record.Validate).
	ErrInvalid = errors.New("keystore: invalid record")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("keystore: store is closed")
)
