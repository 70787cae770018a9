// Package idemserver is the server half of the Idempotency-Key contract: net/http middleware
// that lets an API owner execute each keyed request once and replay its first answer.
//
// It follows the IETF draft "The Idempotency-Key HTTP Header Field"
// (draft-ietf-httpapi-idempotency-key-header) and Stripe's documented behaviour:
//
//   - the key comes from the Idempotency-Key header, an RFC 8941 sf-string or a bare token of
//     visible ASCII, at most 255 characters; a missing key on an operation that requires one,
//     or an invalid key, gets 400 application/problem+json;
//   - a key is scoped by (tenant, operation, key). The tenant comes from Config.Tenant, a
//     function of the authenticated request (never a client header by default); the
//     operation is method and route (Config.Operation, default method + " " + path);
//   - the fingerprint is SHA-256 over method, operation (with the escaped path when the
//     operation is a route pattern or the path has a non-default escape such as %2F, the host
//     when the ServeMux pattern that matched names one, and "?" and the raw query when the
//     request has one: the query is not part of the scope) and the canonical body (a body that is
//     valid JSON is re-encoded with sorted object keys and no whitespace; any other body is
//     taken byte for byte). The same key with another fingerprint gets 422 with the problem
//     type ProblemKeyReused. A JSON body with a member name twice in one object is refused
//     with 400 (ProblemBodyDuplicateMember), since parsers disagree on which value counts;
//     member names that differ only in letter case keep their input order (see CanonicalBody);
//   - a request whose key is being executed gets 409 with Retry-After (ProblemInProgress), or
//     with Config.Wait > 0 waits up to that bound for the first to finish and replays it;
//   - once execution has begun the first answer (status, body, the headers in
//     Config.StoredHeaders) is stored and replayed byte for byte with Idempotent-Replayed: true.
//
// # When execution begins
//
// By default execution begins at handler entry: every answer the handler writes is stored,
// because a payments handler that forgot to say so must never run twice. A handler that
// answers before doing anything (validation) calls NotExecuted(r): that answer is sent but
// not stored, the claim is released, and a corrected request with the same key may run.
// Config.ExplicitBegin reverses the default: only answers written after Begin(r) are stored.
//
// # Timeouts
//
// A timeout that answers at a deadline while the handler runs on, such as http.TimeoutHandler,
// must wrap the middleware, http.TimeoutHandler(mw.Handler(h), d, msg), and never be wrapped
// by it. Wrapped, its 503 is what the middleware sees as the handler's answer once
// TimeoutHandler returns: it stores that 503 for the key (every retry replays the timeout)
// while the handler still runs, and with pgserver it commits the handler's writes so far with
// it, half an operation; the middleware cannot tell a handler that has finished from one still
// running. Wrapping, it answers the client at the deadline while the middleware waits for the
// handler to return and then stores the handler's own answer; with pgserver, a statement run
// with the request's context, which ends at the deadline, fails instead and rolls the claim
// back, storing nothing. The client's retry gets the stored answer or runs the handler once.
// See pgserver's documentation.
//
// # Backends
//
// A Backend stores claims and answers. NewMemory is one process's memory, for tests and
// single-instance servers. The nested module idemserver/pgserver keeps them in PostgreSQL,
// where the claim, the handler's business writes and the stored answer commit in one
// transaction. Package servertest is the conformance suite both pass.
//
// # Status endpoint
//
// Middleware.KeyStatusHandler answers GET requests about a key in the convention idem's client
// reads by default: 200 {"status":"completed","response_status":N,"response_body":...},
// 202 {"status":"processing"} with Retry-After, 404 {"status":"not_found"}.
//
// The handler's answer is buffered in memory until it is stored, and only then sent: nothing
// reaches a client before the backend holds it. Handlers that stream (http.Flusher) are not
// supported behind the middleware.
//
// # Recovery points
//
// A handler that calls a third party mid-request splits its work into phases with
// Checkpoint(r, point) and resumes from RecoveryPoint(r) after a crash; see pgserver's
// documentation for the pattern. A point is a non-empty name: RecoveryPoint returns "" for a
// fresh start, so Checkpoint refuses "" (ErrEmptyRecoveryPoint).
//
// # Conventions of your API
//
// Config.WriteProblem renders the middleware's own answers (400, 401, 409, 413, 422, 500, 503) in
// the API's error format instead of application/problem+json; Config.Fingerprint replaces the
// canonical fingerprint (idemtest uses a byte-exact one, to catch clients that re-encode a
// body between attempts).
//
// Credentials are never stored: Authorization, Cookie, Proxy-Authorization, Set-Cookie and
// WWW-Authenticate cannot be allow-listed.
package idemserver
