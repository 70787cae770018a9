// Package probe grades an HTTP API against the Idempotency-Key contract that idem's client
// relies on (draft-ietf-httpapi-idempotency-key-header, RFC 9110 §10.2.3, Stripe's documented
// behaviour; README "The contract"), detects which dialect of docs/DIALECTS.md it speaks and
// suggests the idem client configuration (and profile) that fits it. docs/PROBE.md is the
// operator's guide.
//
// The probe CREATES REAL OPERATIONS: every check sends POST requests that the API executes
// (a payment, with the default body), about 35 with the defaults. Point it only at a sandbox
// or test environment. Run refuses to send anything unless Config.Sandbox is true
// (ErrNotSandbox). NewPlan lists the payments a run would make, per check, and sends nothing;
// Report.Charges counts those it made.
//
// # Rows
//
// Each check is a Row whose Result is Honoured, Broken or NotObserved, with its evidence and
// the number of trials (payments or requests) it rests on:
//
//   - create: a request with a fresh key is executed (2xx). A 5xx that the API then replays
//     as the key's stored answer is not transient: create tries another key (5 at most) and,
//     if every one is a stored 5xx, says so; the trials still run.
//   - replay: the same key and body again gets the same status and byte-identical body (or
//     the resource as it is now, same id; or a 409 naming the resource).
//   - replay-marker: that replay carries "Idempotent-Replayed: true" (not required by the
//     draft; NotObserved without it). Broken when the first answer to a fresh key carries
//     it too: the marker then tells nothing, and idem would read a first 5xx as a stored one.
//   - key-reuse: the same key with another body gets 422 naming key reuse (or Stripe's 400
//     idempotency_error); the error code is reported so that a client can recognise it
//     (idem.IsKeyReuse, idem.KeyConflictCodes). An answer idem's default classifiers do not
//     read is honoured when the detected dialect's profile has a rule reading it as key
//     reuse (PayPal's, Increase's).
//   - in-progress: Config.Concurrency identical requests with one fresh key at once, on
//     connections opened beforehand: a 409 with Retry-After, or identical answers from one
//     execution. Best effort: a burst without a 409 is repeated with a fresh key (one more
//     operation) up to Config.Rounds times, then reported NotObserved.
//   - lost-response: every LostEvery-th trial cuts its own answer after the request was
//     written (at the answer's first byte, or at the client's timeout): the resend under the
//     key must charge nothing more (the search lists one charge).
//   - stored-5xx: trials whose answer was a 5xx: the resend replays it, or completes the one
//     charge (the search lists at most one). NotObserved when no 5xx came, with the
//     probability that a server answering one on 10% of its executions would have shown one.
//   - retention: with Config.Retention (the API's advertised retention) at most
//     Config.RetentionWait, a key resent 90% into it must be replayed.
//   - status-completed / status-not-found: the status endpoint (Config.KeyStatusPath,
//     default Path+"/operations/{key}") answers completed with the stored status (2xx, or
//     the stored 5xx of a key that never completed), and not_found for a key never sent, in
//     the convention idem.DecodeKeyStatus reads.
//   - retry-after: every Retry-After seen is delay-seconds or an HTTP-date.
//   - executes-once: the search by reference (Config.SearchPath, default
//     Path+"?reference={reference}", answering {"data":[...]}) lists at most one charge for
//     every reference the probe sent, and one for each answered 2xx. Without a search only
//     different ids for one key are evidence (Broken); one id per key is NotObserved, since
//     a second execution whose answer was never shown would not show.
//
// # Trials and power
//
// Config.Trials payments (DefaultTrials, 30) are each sent under a fresh key and reference
// and resent once with the key; the search then counts every reference's charges. A server
// that charges again after a fraction p of its executions (an unstored 5xx, a lost answer
// whose key was not kept) shows a second charge in each trial with probability p, so the
// trials catch it with probability 1-(1-p)^n: 95.8% for p = 10% and n = 30
// (Report.Power).
//
// # Verdict
//
// Report.Verdict is VerdictSafe only when every row of SafetyChecks (replay, key-reuse,
// in-progress, lost-response, stored-5xx, executes-once) was observed Honoured;
// VerdictUnsafe when one of them, or retention, is Broken; VerdictNotProven otherwise: what
// the probe did not see is not called safe.
//
// # Transient answers
//
// A row is Broken only on evidence against the contract: two charges for one reference, a
// different answer on replay, a 2xx for a reused key with another body, an answer of a kind
// the contract does not allow. Transient answers say nothing about it: a transport error
// (refused connection, DNS failure, reset, timeout), 429, 503, or a 5xx that is not a
// replay. A check resends after one (the same key, the Retry-After honoured up to 5s) at
// most 5 times, then reports NotObserved with the answers it met. In an in-progress burst,
// transient answers are tallied and never make the row Broken. An API that gave no HTTP
// answer at all makes Run return ErrUnreachable, not a report.
//
// # Dialect
//
// Report.Dialect is the profile of profile.All whose dialect the answers fit best: the key
// header, the key-reuse, in-progress and repeat answers matched against each profile's
// rules, the replay model (stored, current state, pointer), what a resend after a 5xx did
// (replayed, completed, executed again), the status endpoint and the advertised retention.
// Profiles whose key travels in the body (Square) are not candidates.
package probe
