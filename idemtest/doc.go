// Package idemtest is a real payments API, on net/http and httptest, that honours the
// server side of idem's contract (draft-ietf-httpapi-idempotency-key-header, RFC 9110,
// Stripe's documented behaviour) and injects faults on demand. idem's tests, examples and
// users run their clients against it; its ledger is the oracle that proves every intent
// executed at most once. It speaks idem's own dialect by default and, with Config.Dialect,
// the idempotency dialect of each provider in docs/DIALECTS.md (see # Dialects below); everything
// up to that section describes the idem dialect.
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
//
// # Dialects
//
// Config.Dialect names the provider whose idempotency semantics the API speaks ([Dialects]
// lists them, [ValidDialect] checks a name; NewHandler panics on an unknown one). Every
// dialect takes the same payment body at POST /v1/payments (each path of Config.Paths) and
// every charge it shows is {"id","amount","currency","customer","reference","status"} with
// status "succeeded" or "canceled". Only the key handling, the error format and the settling
// route differ. idem and ietf run on idemserver's middleware as described above (ietf
// without the status endpoint and the search, the middleware's own answers as RFC 9457
// application/problem+json; the payment's 400s and 500s keep {"error","message"}). The
// others run on idemtest's own key store, with these common rules: the key comes from the
// dialect's carrier ([KeyCarrier]; Config.KeyHeader overrides a header carrier), read as
// idemserver.ParseKey reads it and at most 255 bytes (stripe), 64 (adyen), 45 (square), 200
// (increase) or 255 (others); a POST without it, or with a malformed one, is refused in the
// dialect's format and executes nothing (the simulator requires a key even where the
// provider makes it optional: a key-less request is a client bug); a key is scoped by
// (Authorization, path); the fingerprint is over the body bytes (square: the body's
// canonical JSON without idempotency_key); a body that fails validation is refused (400;
// 422 for checkout and gocardless) and stores nothing; a key is forgotten Config.KeyRetention
// after its first request (by Config.Now; defaults below), and is then a new request.
//
// Per dialect: the key carrier; the answer to the same key while the first request runs;
// to the same key with another body; to a repeat of a completed key:
//
//   - idem: Idempotency-Key; 409 {"error":"request_in_progress"}; 422
//     {"error":"idempotency_key_reused"}; the stored answer with "Idempotent-Replayed: true".
//   - ietf: Idempotency-Key; 409 and 422 as application/problem+json ({"type","title",
//     "status","detail"}); the stored answer with "Idempotent-Replayed: true".
//   - stripe: Idempotency-Key; 409 {"error":{"type":"idempotency_error","code":
//     "idempotency_key_in_use","message":...}}; 400 {"error":{"type":"idempotency_error",
//     "message":"Keys for idempotent requests can only be used with the same parameters..."}};
//     the stored answer byte for byte (a stored 500 included) with "Idempotent-Replayed: true".
//   - stripe-v2: as stripe, except that a key whose stored answer is a 5xx is completed by the
//     repeat: charged if it was not, then 201 with the charge (kept: later repeats replay it).
//   - adyen: Idempotency-Key; 409 {"status":409,"errorCode":"704","message":"request already
//     processed or in progress","errorType":"validation"}; 422, the same body with
//     "status":422; the stored answer, without a replay header.
//   - paypal: PayPal-Request-Id; 409 {"name":"RESOURCE_CONFLICT","message":...,"details":
//     [{"issue":"PREVIOUS_REQUEST_IN_PROGRESS",...}]}; 422 {"name":"UNPROCESSABLE_ENTITY",
//     "details":[{"issue":"PAYPAL_REQUEST_ID_PREVIOUSLY_USED",...}]}; 200 with the charge as it
//     is now (its current status).
//   - checkout: Cko-Idempotency-Key; 409 {"error_type":"request_in_progress","error_codes":
//     ["idempotency_key_in_progress"]}; 422 {"error_type":"request_invalid","error_codes":
//     ["idempotency_key_reused"]}; the stored 2xx, without a replay header. Only 2xx answers
//     are kept: after a 4xx or 5xx the key is free and the same request executes again.
//   - gocardless: Idempotency-Key; 409 {"error":{"type":"invalid_state","code":409,"errors":
//     [{"reason":"idempotent_creation_in_progress",...}]}} (no links); the body is not
//     compared; a key that created a payment always gets the 409 pointer below, never a
//     replay.
//   - square: the body field idempotency_key (a header is ignored); 409 {"errors":[{"category":
//     "INVALID_REQUEST_ERROR","code":"CONFLICT",...}]}; 400 {"errors":[{"category":
//     "INVALID_REQUEST_ERROR","code":"IDEMPOTENCY_KEY_REUSED",...}]}; the first successful
//     answer (the charge's 201), without a replay header.
//   - increase: Idempotency-Key; 409 {"type":"idempotency_key_in_progress_error",...}; 409
//     {"type":"idempotency_key_already_used_error","title":...,"status":409,"resource_id":
//     "pay_1"} (resource_id omitted when the key charged nothing); the stored answer with
//     "Idempotent-Replayed: true".
//
// Every in-progress answer carries Retry-After. The 409/422/400 answers for another body
// and the in-progress codes where the provider documents none (paypal, gocardless, square,
// increase, adyen's other body) are the simulator's choice, written in the provider's error
// format; docs/DIALECTS.md says which parts each provider documents.
//
// The gocardless pointer is 409 {"error":{"message":...,"type":"invalid_state","code":409,
// "errors":[{"reason":"idempotent_creation_conflict","message":...,"links":
// {"conflicting_resource_id":"pay_1"}}]}}: the payment's id is at the JSON path
// error.errors[0].links.conflicting_resource_id (GoCardless's documented error format). It
// answers every request with a key that created a payment, whatever the body: GoCardless
// never replays.
//
// Error formats of the other answers (missing or malformed key, validation, 500, 404):
// stripe {"error":{"type","code","message","param"}} (400 invalid_request_error, 500
// api_error); adyen {"status","errorCode","message","errorType"} (400 "702" validation, 500
// "000" internal); paypal {"name","message","details":[{"issue","field","description"}]}
// (400 INVALID_REQUEST, 500 INTERNAL_SERVER_ERROR, 404 RESOURCE_NOT_FOUND); checkout
// {"error_type","error_codes"} (422 request_invalid, 500 internal_server_error); gocardless
// {"error":{"message","type","code","errors":[{"reason","message","field"}]}} (400
// invalid_api_usage, 422 validation_failed, 500 type "gocardless"); square
// {"errors":[{"category","code","detail","field"}]} (400 MISSING_REQUIRED_PARAMETER or
// INVALID_VALUE, 500 API_ERROR INTERNAL_SERVER_ERROR); increase {"type","title","status",
// "detail"} (400 invalid_parameters_error, 500 internal_server_error, 404
// object_not_found_error).
//
// Settling routes, under each path P of Config.Paths (/v1/payments by default); lookups are
// scoped to the tenant (Authorization) and P:
//
//	idem        GET P/operations/{key} and GET P?reference=R (above)
//	ietf        none
//	stripe      GET P/search?query=metadata['reference']:'R' ([StripeSearchPath]) -> 200
//	stripe-v2     {"object":"search_result","data":[charge...],"has_more":false}; a charge is
//	              listed only Config.SearchLag (default DefaultSearchLag, 2 s) after its
//	              execution, by Config.Now; 400 for any other query
//	adyen       POST /v1/cancels {"paymentReference":"R"} ([CancelsPath]) -> 201
//	              {"paymentReference":"R","pspReference":"cancel_<n>","status":"received"}:
//	              every charge of the tenant with reference R becomes "canceled", a charge
//	              whose request arrived before the cancel and is still executing included;
//	              a later payment with R is not affected. No key, no faults.
//	paypal      GET P/{id} ([PaymentPath]) -> 200 charge, 404 if not the tenant's
//	gocardless  GET P/{id}, the id from error.errors[0].links.conflicting_resource_id
//	checkout    GET P?reference=R ([SearchPath]) -> 200 {"data":[charge...]}, consistent
//	square      none (a person)
//	increase    GET P?idempotency_key=K ([KeyListPath]) -> 200 {"data":[charge...]}
//
// Retention (Config.KeyRetention, 0 for the default): paypal 6 h ([PayPalKeyRetention]),
// adyen 7 days ([AdyenKeyRetention]), the other key-store dialects 24 h
// ([DefaultKeyRetention]); idem and ietf keep idemserver's (24 h from the answer).
//
// # Faults in the dialects
//
// Faults keep their names. Before-processing faults (503, 503-date, 429, 502, reset) answer
// the same in every dialect and execute nothing (adyen adds "transient-error: true" to the
// 503, 429 and 502); a retry with the key then executes once. FaultSlow holds a claimed key
// for SlowDelay in every dialect (a concurrent request with the key gets the in-progress
// answer), then executes and answers 201. The others, and what a retry with the same key
// and body then answers (charges: the reference's ledger entries after the retry):
//
//	fault                    idem, ietf,        stripe-v2       adyen                paypal          checkout         gocardless       square
//	                         stripe, increase
//	drop-after-commit        201 replayed; 1    201; 1          201; 1               200 now; 1      201 cached; 1    409 pointer; 1   201; 1
//	500-after-commit         201 replayed; 1    201; 1          201; 1 (the 500 has  200 now; 1      not cached:      409 pointer; 1   201; 1
//	                                                            no transient-error)                  201 again; 2
//	stored-500               500 replayed; 0    completed:      500 has transient-   nothing made,   not cached:      key released:    key released:
//	                                            201; 1          error: true, key     key released:   201; 1           201; 1           201; 1
//	                                                            released: 201; 1     201; 1
//	stored-500-after-charge  500 replayed; 1    201 for the     500 replayed (no     200 now; 1      not cached:      409 pointer; 1   201 for the
//	                                            charge; 1       transient-error); 1                  201 again; 2                      charge; 1
//
// In words: drop- and 500-after-commit execute and keep the 201 while the wire gets a reset
// or a 500 (checkout keeps only what it answered, a 2xx, so a 500 leaves the key free);
// stored-500 fails before charging (kept as the key's answer only where the provider
// replays stored errors: idem, ietf, stripe, increase; completed by stripe-v2); stored-500-
// after-charge charges and then answers 500 (replayed by the replaying dialects, completed
// by stripe-v2, the resource now for paypal, a pointer for gocardless, the charge's 201 for
// square, a free key and a second charge for checkout).
//
// # Ledger
//
// [Handler.ExecutionsByReference] counts charges per reference; [Handler.ChargesByReference]
// also counts how many of them were canceled (adyen), so exactly-once net of cancels is
// charged-canceled == 1. [Handler.ExecutionByID] returns one charge, with its Canceled flag.
package idemtest
