// Package idemtest is a real payments API, on net/http and httptest, that honours the
// server side of idem's contract (draft-ietf-httpapi-idempotency-key-header, RFC 9110,
// Stripe's documented behaviour) and injects faults on demand. idem's tests, examples and
// users run their clients against it; its ledger is the oracle that proves every intent
// executed at most once.
//
// The server half is idemserver's: every POST runs behind idemserver's middleware on a
// memory backend (key parsing, claim, 409, 422, replay, the status endpoint), and this
// package adds the payment handler, the ledger and the faults around it
// ([Handler.Middleware] returns the middleware). Its configuration departs from
// idemserver's defaults in three documented ways: the tenant is the raw Authorization
// header (a test server has no verified credentials), the fingerprint is over the body bytes
// as sent (stricter than idemserver's canonical JSON, to catch clients that re-encode a body
// between attempts), and the middleware's answers use this API's error format
// (idemserver.Config.WriteProblem).
//
// # Endpoints
//
//	POST /v1/payments                      {"amount":1000,"currency":"EUR","customer":"cus_1","reference":"order-7"}
//	GET  /v1/payments/operations/{key}     status of the operation that carried {key}
//	GET  /v1/payments?reference=R          the tenant's charges with reference R, oldest first
//
// A POST must carry an Idempotency-Key header (name configurable), either a bare token of
// visible ASCII or an RFC 8941 sf-string in double quotes (unquoted by the server), as
// idemserver.ParseKey reads it. Missing: 400 {"error":"missing_idempotency_key"}; empty,
// malformed, repeated or longer than [MaxKeyLength]: 400 {"error":"invalid_idempotency_key"}.
// Every error answer is {"error":code,"message":text}.
//
// A key is scoped by (tenant, path): the tenant is the raw Authorization header value ("" if
// absent), the path is the endpoint's path (idemserver operation "POST "+path). The request
// fingerprint is SHA-256 over method, path and the body bytes. Claiming a key is atomic:
//
//   - new key: validated, executed (one ledger entry), and the 201 answer is stored;
//   - same key, other fingerprint: 422 {"error":"idempotency_key_reused"};
//   - same key, still processing: 409 {"error":"request_in_progress"} with Retry-After;
//   - same key, completed: the stored status, Content-Type and byte-identical body are
//     replayed with "Idempotent-Replayed: true" (a stored 500 included).
//
// A request that fails validation (400) releases its claim and stores nothing: the key can
// be used again with a valid body.
//
// The status endpoint uses the same tenant and the path scope of its endpoint: completed ->
// 200 {"status":"completed","response_status":201,"response_body":{...}}; processing -> 202
// {"status":"processing"} with Retry-After; unknown -> 404 {"status":"not_found"}.
//
// The search by reference is the business lookup a client uses when a key can tell no more
// (a stored 500): 200 {"data":[payment...]} with the charges of the tenant (Authorization)
// on that path whose body carried the reference, oldest first, whatever their keys; an empty
// list when there is none; 400 without exactly one non-empty reference. The ledger counts
// executions per key ([Handler.ExecutionsFor]) and per reference
// ([Handler.ExecutionsByReference]): exactly-once is judged per reference.
//
// # Faults
//
// Each arriving POST consumes one [Fault]: the next scripted one ([Handler.Script]), else a
// random one (Config.FaultRate, Config.Seed, Config.Faults), else [FaultNone]. The fault is
// taken on arrival, before the key is read or claimed:
//
//   - before-processing faults ([Fault.BeforeProcessing]: 503, 503 with an HTTP-date, 429,
//     502, connection reset) always apply and execute nothing, even for a key that is
//     already completed;
//   - the other faults (slow, drop after commit, 500 after commit, stored 500 without a
//     charge, stored 500 after a charge: the last two look identical to a client) only act on a
//     request that claims a new key and passes validation. On a replay, a 409, a 422 or a
//     400 they are consumed without effect and not counted in [Stats].Faults.
//
// Where each fault lives: before-processing faults answer on the wire before the
// middleware; slow and the stored 500s are the payment handler's behaviour inside it (the
// middleware stores the 500 it writes); drop-after-commit and 500-after-commit let the
// middleware store the 201 and then replace the answer on the wire.
package idemtest
