// Package probe grades an HTTP API against the Idempotency-Key contract that idem's client
// relies on (draft-ietf-httpapi-idempotency-key-header, RFC 9110 §10.2.3, Stripe's documented
// behaviour; README "The contract") and suggests the idem client configuration that fits it.
//
// The probe CREATES REAL OPERATIONS: every check sends POST requests that the API executes
// (a payment, with the default body). Point it only at a sandbox or test environment. Run
// refuses to send anything unless Config.Sandbox is true (ErrNotSandbox).
//
// # Checks
//
// Each check is a Row whose Result is Honoured, Broken or NotObserved, with the evidence:
//
//   - create: a request with a fresh key is executed (2xx). The other checks need it.
//   - replay: the same key and body again gets the same status and byte-identical body.
//   - replay-marker: that replay carries "Idempotent-Replayed: true" (not required by the
//     draft; NotObserved without it).
//   - key-reuse: the same key with another body gets 422 naming key reuse; the error code
//     is reported so that a client can recognise it (idem.IsKeyReuse, idem.KeyConflictCodes).
//   - in-progress: Config.Concurrency identical requests with one fresh key at once, on
//     connections opened beforehand: a 409 with Retry-After, or identical answers from one
//     execution. Best effort: requests that do not overlap on the server prove nothing, so a
//     burst without a 409 is repeated with a fresh key (one more operation) up to
//     Config.Rounds times, then reported NotObserved. An API whose handler answers in
//     microseconds (an in-memory test server) rarely shows an overlap; one that calls a bank
//     usually does.
//   - status-completed / status-not-found: the status endpoint (Config.KeyStatusPath, default
//     Path+"/operations/{key}") answers completed with the stored status for the key of
//     create, and not_found for a key never sent, in the convention idem.DecodeKeyStatus reads.
//     An API without one is NotObserved, and the suggested KeyStatusURL is empty.
//   - retry-after: every Retry-After seen (409, 429, 503, 202) is delay-seconds or an
//     HTTP-date (idem.ParseRetryAfter). Best effort: an API that never throttled the probe
//     is NotObserved.
//   - executes-once: the probe's references were executed once each, judged by the search
//     by reference (Config.SearchPath, default Path+"?reference={reference}", answering
//     {"data":[...]}) when the API has one, else by the "id" member of the answers. This row
//     catches an API that executes a retry again even when it replays the first answer.
//
// # Transient answers
//
// A row is Broken only on evidence against the contract: two executions of one reference, a
// different answer on replay, a 2xx for a reused key with another body, an answer of a kind
// the contract does not allow. Transient answers say nothing about it: a transport error
// (refused connection, DNS failure, reset, timeout), 429, 503, or a 5xx that is not a
// replay. A check resends after one (the same key, the Retry-After honoured up to 5s) at
// most 5 times, then reports NotObserved with the answers it met. A replayed 5xx is the key's stored answer (execution began, effect unknown): create
// then starts another operation under a new key. In an in-progress burst, transient answers
// are tallied and never make the row Broken. An API that gave no HTTP answer at all (every
// connection refused, the name not resolved) makes Run return ErrUnreachable, not a report.
package probe
