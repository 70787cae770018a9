// Package idem makes calls to payment-style HTTP APIs safe to retry.
//
// A timeout means "outcome unknown", not "failed": a payment that timed out may have been
// executed. idem turns that unknown into a known result without executing an intent twice.
//
// # Guarantees
//
//   - Each Operation (one user intent) gets an idempotency key, a UUIDv7 unless the
//     caller supplies one, never derived from the payload. The key, the request fingerprint
//     (SHA-256 of method, normalised URL with its query, and body: see Fingerprint) and the
//     request itself are persisted in a
//     keystore.Store before the first byte is sent.
//   - Every attempt carries the same key header and the byte-identical body. net/http's own
//     hidden replays are turned off: the server sees exactly the attempts idem records.
//   - Retries are bounded by Policy (attempts, elapsed time, per-attempt timeout, jittered
//     exponential backoff with a hard ceiling) and by a client-wide retry budget.
//   - Retry-After (RFC 9110 §10.2.3, delay-seconds and all three HTTP-date forms) is honoured
//     as the earliest time to come back, up to Policy.MaxRetryAfter; a longer wait stops the
//     call at once with ErrRetryAfterTooLong instead of sleeping.
//   - When an attempt's outcome is unknown (written, then a timeout, reset or EOF; 408, 425,
//     500, 502, 504), the status endpoint is asked with the same key before any resend.
//   - Every call ends in a known state: a *Result, or an *OperationError that says whether
//     the outcome is still unknown (errors.Is(err, ErrOutcomeUnknown)). The keystore record
//     holds the same state; pending records survive restarts and Client.Recover reconciles
//     them.
//
// # Real providers: Config.Profile
//
// Stripe, Adyen, PayPal, Checkout.com, GoCardless, Square and Increase each answer a
// repeated key differently, keep it for their own time, and settle an unknown outcome their
// own way; none offers idem's status endpoint. Set Config.Profile to the provider's profile
// (package profile: profile.Stripe, profile.PayPal, profile.Checkout, ...): it caps KeyTTL at
// the provider's retention, reads its conflict answers, and settles through its routes (a
// search by reference before any resend where nothing is cached on error, a pointer fetch, a
// cancel by reference). docs/PROVIDERS.md has one line per provider; package webhook settles
// a record from a provider's event.
//
// # The contract with servers
//
// idem follows the IETF draft "The Idempotency-Key HTTP Header Field"
// (draft-ietf-httpapi-idempotency-key-header), RFC 9110 and Stripe's documented behaviour.
// Default classification (DefaultClassifiers; prepend your own Classifier to override):
//
//	2xx                                     success (Idempotent-Replayed: true marks a replay)
//	transport error before the request      not sent: resend with the same key (proven
//	                                        only through net/http's own *http.Transport;
//	                                        any other: outcome unknown, see Config.HTTPClient)
//	transport error / timeout after write   outcome unknown: status check, then decide
//	408, 425, 500, 502, 504, other 5xx      outcome unknown: status check, then decide
//	429, 503                                not executed: wait Retry-After or backoff, resend
//	409                                     in progress: wait, status check or resend
//	422 naming idempotency-key reuse, or    key reused with another request: ErrKeyConflict
//	  400 naming it precisely (Stripe's
//	  idempotency_error)
//	any other 400 or 422                    validation: ErrPermanent with the response
//	other 4xx                               permanent: ErrPermanent, never retried
//	3xx, 1xx                                outcome unknown: redirects are never followed,
//	                                        and one proves nothing of the effect (a 303
//	                                        says it was processed, RFC 9110 §15.4.4)
//	a replayed 4xx (Idempotent-Replayed)    permanent: the server decided and stored it
//	any other 4xx to a resend after an      outcome unknown: it says nothing of the earlier
//	  unknown outcome, or (but a 400) after attempt, which may still arrive after a "not
//	  a status "not found" for a key that   found"; the record stays pending, unless
//	  may have been sent (this call's, or   Config.Lookup finds the payment (a success;
//	  any resumed record's)                 asked before a 400 after "not found" fails too)
//	a stored 5xx or 3xx (replayed, status endpoint completed with one, or a 5xx marked
//	  "do not retry")                       outcome unknown for good: ErrStoredServerError
//	Stripe-Should-Retry: true               not executed: resend (not a replayed 5xx)
//	Stripe-Should-Retry: false              408, 425 outcome unknown; 409 in progress; 5xx a
//	                                        stored 5xx; key reuse ErrKeyConflict; other
//	                                        4xx permanent; 3xx as without it: the hint
//	                                        never makes a possibly executed answer a failure
//
// A stored 5xx means execution began and its effect is unknown; the key can never tell
// more. It is never a failure and never resent: the record is manual, keeping the stored
// answer, until a business lookup (Config.Lookup, e.g. LookupByReference: a search by the
// caller's reference) or Client.Resolve settles it. A charge found makes the record
// succeeded; none makes it failed with ErrNotExecuted, and only then may the application
// pay again under a new intent.
//
// The status endpoint (Config.KeyStatusURL, or a KeyStatusFunc for other conventions) answers
// 200 {"status":"completed","response_status":201,"response_body":{...}},
// 202 {"status":"processing"} or 404 {"status":"not_found"}. Without one, an unknown outcome
// is resent with the same key, which the server's idempotency makes safe while the key is
// younger than Config.KeyTTL, and never after.
//
// # What idem cannot know
//
// idem cannot make a server idempotent: it relies on the server honouring the key for at
// least KeyTTL. A key older than that whose outcome is unknown is marked for manual
// reconciliation (ErrKeyExpired), never resent. Effects downstream of the server (emails,
// webhooks) are the server's business. And idem makes the call exactly-once, not your own
// database write that follows it: record the result with the intent (an outbox), and use
// Recover's handler to finish what a crash interrupted.
package idem
