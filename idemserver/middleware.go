package idemserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// Middleware executes each keyed request once per (tenant, operation, key) and replays the
// first answer. Create it with New; it is safe for concurrent use.
type Middleware struct {
	cfg Config
	n   counters
	// ownFingerprint: Config.Fingerprint was nil, so the body is canonicalised once for both
	// the duplicate-member check and the fingerprint.
	ownFingerprint bool
}

// New returns a Middleware. Errors match ErrInvalidConfig and name the field.
func New(cfg Config) (*Middleware, error) {
	own := cfg.Fingerprint == nil
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Middleware{cfg: c, ownFingerprint: own}, nil
}

// Handler wraps next, for any router that takes func(http.Handler) http.Handler. A timeout
// wraps the returned handler, never next (see Timeouts in the package documentation):
// http.TimeoutHandler(mw.Handler(h), d, msg), not mw.Handler(http.TimeoutHandler(h, d, msg)).
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	raw, has := r.Header[http.CanonicalHeaderKey(m.cfg.KeyHeader)]
	if !has {
		if m.cfg.Required(r) {
			m.problem(w, r, Problem{Type: ProblemKeyMissing, Title: "Idempotency-Key header required", Status: http.StatusBadRequest,
				Detail: fmt.Sprintf("%s %s requires the %s header", r.Method, r.URL.Path, m.cfg.KeyHeader)})
			return
		}
		next.ServeHTTP(w, r)
		return
	}
	if len(raw) != 1 {
		m.problem(w, r, Problem{Type: ProblemKeyInvalid, Title: "Invalid Idempotency-Key", Status: http.StatusBadRequest,
			Detail: fmt.Sprintf("%d %s headers; send one", len(raw), m.cfg.KeyHeader)})
		return
	}
	key, err := ParseKey(raw[0])
	if err != nil {
		m.problem(w, r, Problem{Type: ProblemKeyInvalid, Title: "Invalid Idempotency-Key", Status: http.StatusBadRequest, Detail: err.Error()})
		return
	}
	tenant, err := m.cfg.Tenant(r)
	if err != nil {
		m.problem(w, r, Problem{Type: ProblemUnauthorized, Title: "Unauthorized", Status: http.StatusUnauthorized})
		return
	}
	body, err := readBody(w, r, m.cfg.MaxBodyBytes)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			m.problem(w, r, Problem{Type: ProblemBodyTooLarge, Title: "Request body too large", Status: http.StatusRequestEntityTooLarge,
				Detail: fmt.Sprintf("at most %d bytes", m.cfg.MaxBodyBytes)})
			return
		}
		m.problem(w, r, Problem{Type: ProblemBodyUnreadable, Title: "Request body unreadable", Status: http.StatusBadRequest})
		return
	}
	scratch := scratchPool.Get().(*canonScratch)
	canon := canonicalizeWith(body, scratch) // with a Config.Fingerprint, for this check only
	if name, dup := canon.dup, canon.hasDup; dup {
		if len(name) > 64 {
			name = name[:64] + "..."
		}
		m.problem(w, r, Problem{Type: ProblemBodyDuplicateMember, Title: "Duplicate member name in JSON body", Status: http.StatusBadRequest,
			Detail: fmt.Sprintf("JSON object member %q appears more than once; send each member once", name)})
		return
	}
	// The execution is made here, before the claim, so that the body reader and the
	// fingerprint are made in it.
	ex := &execution{m: m}
	ex.body.Reset(body)
	r.Body = &ex.body
	op := m.cfg.Operation(r)
	// A key is stored under its tenant and operation as text: PostgreSQL refuses invalid
	// UTF-8 and NUL there, and a claim that can never be written would answer 503 "retry"
	// forever. Refused before the claim on every backend, so both speak one contract.
	if what, bad := badScopeText(tenant, op); bad {
		m.problem(w, r, Problem{Type: ProblemScopeInvalid, Title: "Request cannot be keyed", Status: http.StatusBadRequest,
			Detail: fmt.Sprintf("the request's %s is not valid UTF-8 or holds a NUL byte", what)})
		return
	}
	// PostgreSQL's primary-key index cannot hold an entry over about 2.7 KB either.
	if len(tenant) > MaxTenantLength || len(op) > MaxOperationLength {
		m.problem(w, r, Problem{Type: ProblemScopeInvalid, Title: "Request cannot be keyed", Status: http.StatusBadRequest,
			Detail: fmt.Sprintf("the request's tenant (%d bytes) or operation, method and path (%d bytes), is longer than %d or %d bytes",
				len(tenant), len(op), MaxTenantLength, MaxOperationLength)})
		return
	}
	scope := Scope{Tenant: tenant, Operation: op, Key: key}
	// The query is part of the request, though not of the key's scope: POST /refunds?amount=
	// 100 and ?amount=200 under one key must not replay one as the other (idem's client
	// fingerprints the query too). Without one, the fingerprint is what it always was. So is
	// the path, when the operation names a route pattern (Config.Operation) rather than the
	// path itself: POST /customers/cus_B/charges must not replay cus_A's answer. And so it is
	// when the path was escaped otherwise than by default (RawPath set): /files/a%2Fb and
	// /files/a/b decode to one Path, but a router may send them to different handlers.
	// So is the host, when the route that matched names one (ServeMux's "POST a.example/x"):
	// the same path on another host is then another handler.
	fpOp := op
	if host := hostRouted(r); !endsWithPath(op, r.URL.Path) || r.URL.RawPath != "" || host {
		target := r.URL.EscapedPath() // escaped: a "?" in the path stays %3F, apart from the query
		if host {
			target = "//" + r.Host + target
		}
		fpOp = op + " " + target
	}
	if q := r.URL.RawQuery; q != "" {
		fpOp += "?" + q
	}
	var fp []byte
	if m.ownFingerprint {
		fp = fingerprint(ex.fp[:0], r.Method, fpOp, canon)
	} else {
		fp = m.cfg.Fingerprint(r.Method, fpOp, body)
	}
	scratch.release() // canon is not read again (on the paths that return before, it is left to the collector)

	ctx := r.Context()
	var deadline time.Time // the first claim's clock reading plus Config.Wait
	var claim Claim
	for waited := false; ; waited = true {
		now := m.cfg.Now()
		if !waited {
			deadline = now.Add(m.cfg.Wait)
		}
		c, rec, err := m.cfg.Backend.Claim(ctx, ClaimRequest{Scope: scope, Fingerprint: fp, Now: now, Lease: m.cfg.Lease})
		if err != nil {
			m.unavailable(w, r, scope, err)
			return
		}
		if c != nil {
			claim = c
			break
		}
		switch {
		case rec.Fingerprint != nil && !bytes.Equal(rec.Fingerprint, fp):
			m.event(Event{Kind: EventPayloadConflict, Scope: scope, StatusCode: http.StatusUnprocessableEntity})
			m.problem(w, r, Problem{Type: ProblemKeyReused, Title: "Idempotency-Key reused with another request", Status: http.StatusUnprocessableEntity,
				Detail: "this key was used with a different method, route or body; use a new key for a new request", Code: CodeKeyReused})
			return
		case rec.State == StateCompleted:
			m.event(Event{Kind: EventReplay, Scope: scope, StatusCode: rec.Response.StatusCode})
			replay(w, rec.Response)
			return
		}
		if !waited {
			m.event(Event{Kind: EventConcurrent, Scope: scope, StatusCode: http.StatusConflict})
		}
		if m.cfg.Wait <= 0 || !m.cfg.Now().Before(deadline) || m.cfg.Sleep(ctx, m.cfg.WaitPoll) != nil {
			if m.cfg.Wait > 0 {
				m.event(Event{Kind: EventInProgressTimeout, Scope: scope, StatusCode: http.StatusConflict})
			}
			w.Header().Set("Retry-After", m.retryAfter())
			m.problem(w, r, Problem{Type: ProblemInProgress, Title: "A request with this Idempotency-Key is in progress", Status: http.StatusConflict,
				Detail: "retry after Retry-After seconds with the same key and body"})
			return
		}
	}
	if claim.ExpiredReuse() {
		m.event(Event{Kind: EventExpiredReuse, Scope: scope})
	}
	if claim.RecoveryPoint() != "" {
		m.event(Event{Kind: EventTakeover, Scope: scope})
	}
	m.execute(w, r, next, ex, scope, claim)
}

// execute runs next under the claim, then stores (or not) and sends its answer.
// ex is new, from serve, and is filled in here.
func (m *Middleware) execute(w http.ResponseWriter, r *http.Request, next http.Handler, ex *execution, scope Scope, claim Claim) {
	// A resumed claim has committed work: its answer is stored whatever the handler says.
	point := claim.RecoveryPoint()
	ex.claim, ex.scope, ex.begun, ex.point, ex.checkpoint = claim, scope, !m.cfg.ExplicitBegin, point, point != ""
	ctx := claim.Context(withExecution(r.Context(), ex))
	rec := &ex.rec
	rec.header = http.Header{}
	finished := false
	defer func() {
		if finished {
			return
		}
		// next panicked (the panic goes on to net/http, which drops the connection).
		if (!ex.stored() && !lostRollback(claim)) || rollsBack(claim) {
			_ = claim.Release(ctx) // nothing began, or its transaction rolled back: the key is free
			return
		}
		// Execution began and nothing undoes it: freeing the key would let a retry run the
		// operation again. The key keeps a 500 instead: execution began, effect unknown. If
		// even that cannot be stored the claim is kept, never released.
		m.keepFailed(ctx, claim, scope, m.failedAnswer(r))
	}()
	next.ServeHTTP(rec, r.WithContext(ctx))
	finished = true
	resp := rec.response()
	if !ex.stored() && lostRollback(claim) {
		// "Not executed", but the handler's writes can no longer be undone (pgserver: it
		// ended the claim's transaction itself): freed, the key would run it again.
		failed := m.failedAnswer(r)
		m.keepFailed(ctx, claim, scope, failed)
		answer(w, failed)
		return
	}
	if !ex.stored() {
		if err := claim.Release(ctx); err != nil {
			m.unavailable(w, r, scope, err)
			return
		}
		m.event(Event{Kind: EventNotExecuted, Scope: scope, StatusCode: resp.StatusCode})
		sendIn(w, rec.header, resp.StatusCode, resp.Body, &ex.length)
		return
	}
	if _, err := m.completeHandingOver(ctx, claim, ex); err != nil {
		if rollsBack(claim) {
			// The handler's work went with the transaction, or, when only the commit's
			// acknowledgement was lost, committed with its answer: a retry with the same key
			// replays it or runs once.
			m.unavailableSaying(w, r, scope, err, "the answer could not be stored, or its storing could not be confirmed; retry with the same key: a stored answer is replayed, else the request runs once")
			return
		}
		// The handler did its work and its answer could not be stored: the effect stands.
		// As after a panic, the key keeps a 500 if it can, so that no retry runs it again
		// (pgserver, when the handler ended the claim's transaction itself: ErrTxEnded).
		m.event(Event{Kind: EventStoreError, Scope: scope, StatusCode: http.StatusInternalServerError, Err: err})
		failed := m.failedAnswer(r)
		m.keepFailed(ctx, claim, scope, failed)
		answer(w, failed)
		return
	}
	m.event(Event{Kind: EventExecuted, Scope: scope, StatusCode: resp.StatusCode})
	sendFields(w, ex.sent.fields, resp.StatusCode, resp.Body, &ex.length)
}

// keepFailed stores failed (failedAnswer) as the key's answer once execution began and
// nothing undoes it, so that no retry runs the handler again: three tries, and a claim that
// cannot store even that is kept, never released.
func (m *Middleware) keepFailed(ctx context.Context, claim Claim, scope Scope, failed *recorder) {
	for range 3 {
		if _, err := m.complete(ctx, claim, failed); err == nil || errors.Is(err, ErrNotOwner) {
			if err == nil {
				m.event(Event{Kind: EventExecuted, Scope: scope, StatusCode: http.StatusInternalServerError})
			}
			return
		}
	}
}

// failedAnswer is the 500 of a handler whose effect is unknown (ProblemHandlerFailed),
// rendered by Config.WriteProblem, or by WriteProblemJSON when that panics or answers
// with another status: an answer stored for a key must never read as a success.
func (m *Middleware) failedAnswer(r *http.Request) (rec *recorder) {
	p := Problem{Type: ProblemHandlerFailed, Title: "The handler failed after execution began", Status: http.StatusInternalServerError,
		Detail: "the operation's effect is unknown and this key will not run it again; find the operation by its reference"}
	defer func() {
		if recover() != nil || rec.response().StatusCode != p.Status {
			rec = newRecorder()
			writeProblem(rec, p)
		}
	}()
	rec = newRecorder()
	m.problem(rec, r, p)
	return rec
}

// MaxTenantLength and MaxOperationLength bound, in bytes, the tenant (Config.Tenant) and the
// operation (Config.Operation) a key is stored under: longer, a request gets 400
// ProblemScopeInvalid on every backend (pgserver's index could not store the key, and a claim
// that can never be written would answer 503 "retry" forever). With MaxKeyLength, a key's
// row stays well inside PostgreSQL's index entry limit (about 2.7 KB).
const (
	MaxTenantLength    = 255
	MaxOperationLength = 1024
)

// badScopeText names the first of tenant and operation that is not valid UTF-8 or holds a
// NUL byte.
func badScopeText(tenant, operation string) (string, bool) {
	for _, f := range [...]struct{ name, s string }{{"tenant", tenant}, {"operation (method and path)", operation}} {
		if !utf8.ValidString(f.s) || strings.IndexByte(f.s, 0) >= 0 {
			return f.name, true
		}
	}
	return "", false
}

// endsWithPath reports whether op ends with " " and path (strings.HasSuffix(op, " "+path),
// without building that string).
func endsWithPath(op, path string) bool {
	i := len(op) - len(path) - 1
	return i >= 0 && op[i] == ' ' && op[i+1:] == path
}

// hostRouted reports whether the ServeMux pattern that matched r names a host
// ("POST a.example/v1/orders"): r.Pattern is "[METHOD ][HOST]/[PATH]".
func hostRouted(r *http.Request) bool {
	p := r.Pattern
	if i := strings.IndexAny(p, " \t"); i >= 0 {
		p = strings.TrimLeft(p[i:], " \t")
	}
	return p != "" && p[0] != '/'
}

// bodyReader is the request body the handler reads, from the bytes the middleware read
// (io.NopCloser over a bytes.Reader, in one allocation less).
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }
