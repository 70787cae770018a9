package idemserver

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"sync"
)

// ErrNoClaim is returned by Begin, NotExecuted and Checkpoint for a request that does not
// run under the middleware with a claimed key.
var ErrNoClaim = errors.New("idemserver: request holds no idempotency claim")

// ErrAlreadyBegun is returned by NotExecuted after Checkpoint committed work: that answer
// must be stored.
var ErrAlreadyBegun = errors.New("idemserver: execution has begun")

// ErrEmptyRecoveryPoint is returned by Checkpoint (and by the Checkpoint of NewMemory's and
// pgserver's claims) for the point "": RecoveryPoint returns "" for a fresh start, so a
// takeover after such a checkpoint would run the phase it committed again. Nothing is
// recorded or committed: the handler goes on in its current phase.
var ErrEmptyRecoveryPoint = errors.New(`idemserver: Checkpoint needs a non-empty recovery point: "" is what RecoveryPoint returns for a fresh start`)

type execKey struct{}

// execution is the handler's view of its claim. It is also the request's context that
// carries it (withExecution), and holds the recorder of the handler's answer, the request's
// body reader and fingerprint, the store's deadline context, the header sent and the Content-Length value, so
// that all of them cost one allocation.
type execution struct {
	context.Context // the request's
	m               *Middleware
	claim           Claim
	scope           Scope
	rec             recorder
	store           lazyDeadline      // the context its answer is stored under (Middleware.complete)
	length          [1]string         // the answer's Content-Length value (sendIn)
	sent            sentHeader        // the answer's header as sent (completeHandingOver)
	fp              [sha256.Size]byte // the request's fingerprint, when the middleware makes it
	body            bodyReader        // the request body the handler reads

	mu          sync.Mutex
	begun       bool
	notExecuted bool
	checkpoint  bool
	point       string
}

// withExecution returns ctx carrying ex (as context.WithValue would): ex itself, over ctx.
func withExecution(ctx context.Context, ex *execution) context.Context {
	ex.Context = ctx
	return ex
}

// Value returns ex for execKey, and ctx's values otherwise.
func (ex *execution) Value(key any) any {
	if key == (execKey{}) {
		return ex
	}
	return ex.Context.Value(key)
}

func executionOf(r *http.Request) *execution {
	ex, _ := r.Context().Value(execKey{}).(*execution)
	return ex
}

func (ex *execution) stored() bool {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return ex.checkpoint || ex.begun && !ex.notExecuted
}

// Begin marks that execution of r has begun: from now on the answer is stored and replayed.
// It is needed only with Config.ExplicitBegin (otherwise execution begins at entry) and
// cancels an earlier NotExecuted. Errors: ErrNoClaim.
func Begin(r *http.Request) error {
	ex := executionOf(r)
	if ex == nil {
		return ErrNoClaim
	}
	ex.mu.Lock()
	ex.begun, ex.notExecuted = true, false
	ex.mu.Unlock()
	return nil
}

// NotExecuted marks that r's answer is given before execution began (a validation error, a
// 503 because a dependency is down): it is sent but not stored, the key is released (with
// pgserver, the claim's transaction is rolled back, the handler's writes with it), and a
// corrected request with the same key may run. With a backend that does not roll back
// (NewMemory), call it only before the handler's first write: the next request with the key
// runs the handler again. Errors: ErrNoClaim, ErrAlreadyBegun after a Checkpoint.
func NotExecuted(r *http.Request) error {
	ex := executionOf(r)
	if ex == nil {
		return ErrNoClaim
	}
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if ex.checkpoint {
		return ErrAlreadyBegun
	}
	ex.notExecuted = true
	return nil
}

// Checkpoint durably records that r's handler finished the phase before point and begins
// execution (see Begin). With pgserver it commits the claim and the handler's writes so far
// and opens a new transaction for the next phase: call it right before calling a third party,
// so that a retry after a crash resumes at point (RecoveryPoint) instead of starting over.
// point names the phase that comes next and must not be empty. Errors: ErrNoClaim,
// ErrEmptyRecoveryPoint (nothing is done), ErrNotOwner, the backend's.
func Checkpoint(r *http.Request, point string) error {
	ex := executionOf(r)
	if ex == nil {
		return ErrNoClaim
	}
	if point == "" {
		return ErrEmptyRecoveryPoint
	}
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if err := ex.claim.Checkpoint(r.Context(), point, ex.m.cfg.Now(), ex.m.cfg.Lease); err != nil {
		return err
	}
	ex.begun, ex.notExecuted, ex.checkpoint, ex.point = true, false, true, point
	return nil
}

// RecoveryPoint returns the last checkpoint reached for r's key: by this request, or by a
// previous owner that crashed after it (then the handler resumes from there). "" means a
// fresh start or no claim.
func RecoveryPoint(r *http.Request) string {
	ex := executionOf(r)
	if ex == nil {
		return ""
	}
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return ex.point
}

// KeyScope returns the scope of r's claim and true, when r runs under the middleware.
func KeyScope(r *http.Request) (Scope, bool) {
	ex := executionOf(r)
	if ex == nil {
		return Scope{}, false
	}
	return ex.scope, true
}
