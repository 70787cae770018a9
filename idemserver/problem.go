package idemserver

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Problem types (RFC 9457 "type" members) of the answers the middleware writes itself. Clients
// recognise key reuse by ProblemKeyReused or by the code member "idempotency_key_reused".
// The URIs are identifiers, compared as strings (RFC 9457 §3.1.1), not links: no page is
// published at them and they are not expected to resolve; each one's meaning is its
// constant's doc here.
const (
	// ProblemKeyReused: 422, the key was used before with another request (fingerprint).
	ProblemKeyReused = "https://idemkit.dev/problems/idempotency-key-reused"
	// ProblemKeyMissing: 400, the operation requires an Idempotency-Key header.
	ProblemKeyMissing = "https://idemkit.dev/problems/idempotency-key-missing"
	// ProblemKeyInvalid: 400, the Idempotency-Key header is not a valid key.
	ProblemKeyInvalid = "https://idemkit.dev/problems/idempotency-key-invalid"
	// ProblemInProgress: 409, a request with this key is being executed; retry after Retry-After.
	ProblemInProgress = "https://idemkit.dev/problems/idempotency-key-in-progress"
	// ProblemUnauthorized: 401, Config.Tenant refused the request.
	ProblemUnauthorized = "https://idemkit.dev/problems/unauthorized"
	// ProblemBodyTooLarge: 413, the request body exceeds Config.MaxBodyBytes.
	ProblemBodyTooLarge = "https://idemkit.dev/problems/body-too-large"
	// ProblemBodyUnreadable: 400, the request body could not be read.
	ProblemBodyUnreadable = "https://idemkit.dev/problems/body-unreadable"
	// ProblemBodyDuplicateMember: 400, the request body is JSON with a member name twice in
	// one object (after decoding escapes, so "amount" and "\u0061mount" are one name). JSON
	// parsers disagree on which value counts (RFC 8259 section 4), so the request's meaning,
	// such as its amount, is ambiguous; it is refused before the key is claimed, and the
	// corrected request may use the same key.
	ProblemBodyDuplicateMember = "https://idemkit.dev/problems/json-duplicate-member"
	// ProblemScopeInvalid: 400, the request's tenant (Config.Tenant) or operation
	// (Config.Operation: method and path by default, so a path such as /v1/pay%FF) is not
	// valid UTF-8, holds a NUL byte, or is longer than MaxTenantLength or MaxOperationLength
	// bytes, and a key cannot be stored under it. Nothing is claimed or executed.
	ProblemScopeInvalid = "https://idemkit.dev/problems/scope-invalid"
	// ProblemHandlerFailed: 500, stored for the key, the handler panicked after execution
	// began and no rollback undid its work (see RollbackClaim): its effect is unknown, and
	// the key never runs again. Find the operation by its business reference.
	ProblemHandlerFailed = "https://idemkit.dev/problems/handler-failed"
	// ProblemUnavailable: 503, the backend failed; nothing was stored or executed.
	ProblemUnavailable = "https://idemkit.dev/problems/idempotency-store-unavailable"
)

// CodeKeyReused is the "code" member of the ProblemKeyReused answer, the spelling many APIs
// (and idem's test server) use in an error code.
const CodeKeyReused = "idempotency_key_reused"

// Problem is an RFC 9457 application/problem+json body.
type Problem struct {
	Type   string `json:"type"`             // a URI naming the problem (the Problem* constants)
	Title  string `json:"title"`            // a short human summary, the same for every instance of Type
	Status int    `json:"status"`           // the HTTP status the answer is written with
	Detail string `json:"detail,omitempty"` // what happened to this request, for a person
	Code   string `json:"code,omitempty"`   // a machine code, such as CodeKeyReused, "" for none
}

// problem answers p through Config.WriteProblem, or as application/problem+json.
func (m *Middleware) problem(w http.ResponseWriter, r *http.Request, p Problem) {
	if m.cfg.WriteProblem != nil {
		m.cfg.WriteProblem(w, r, p)
		return
	}
	writeProblem(w, p)
}

// WriteProblemJSON writes p as an RFC 9457 application/problem+json body with status p.Status
// and an exact Content-Length: the middleware's default rendering, for a Config.WriteProblem
// that handles only some problems its own way.
func WriteProblemJSON(w http.ResponseWriter, p Problem) { writeProblem(w, p) }

// writeProblem writes p as application/problem+json with its status.
func writeProblem(w http.ResponseWriter, p Problem) {
	b, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(b)
}
