// Package idem makes calls to payment-style HTTP APIs safe to retry.
//
// A timeout means "outcome unknown", not "failed": a payment that timed out may have been
// executed. idem turns that unknown into a known result without executing an intent twice.
// A Client (NewClient, Config) runs each Operation (NewOperation: one user intent) with Do:
//
//   - its idempotency key (a UUIDv7 unless the caller gives one, never derived from the
//     payload) and its request are persisted in a keystore.Store before the first byte is
//     sent; every attempt carries the same key and the byte-identical body, and net/http's
//     hidden replays are turned off, so the server sees exactly the attempts idem records;
//   - retries are bounded by Policy and a client-wide Budget, and honour Retry-After (RFC
//     9110 §10.2.3) up to Policy.MaxRetryAfter;
//   - after an attempt whose outcome is unknown, the status endpoint (Config.KeyStatusURL)
//     is asked with the same key before any resend;
//   - every call ends in a *Result or an *OperationError that says whether the outcome is
//     still unknown (errors.Is(err, ErrOutcomeUnknown)); a stored 5xx (ErrStoredServerError)
//     is never a failure and never resent: Config.Lookup or Client.Resolve settles it;
//   - Client.Recover reconciles the pending records a crash left.
//
// How each answer is classified, after the IETF Idempotency-Key draft, RFC 9110 and
// Stripe's documented behaviour: outcome.DefaultClassifiers (docs/CONTRACT.md has the same table).
// Real providers (Stripe, Adyen, PayPal, Checkout.com, GoCardless, Square, Increase):
// Config.Profile, package profile and docs/PROVIDERS.md; package webhook settles a record
// from a provider's event. Under a generated client or an SDK: NewHTTPClient, Transport. A
// fleet on one PostgreSQL keystore (keystore/pgstore): Config.Fleet.Owner, Config.Fleet.LeaseTTL,
// Config.Fleet.ReclaimInterval. The operator's view: package idemadmin and cmd/idemctl.
//
// What idem cannot know: it relies on the server honouring the key for at least
// Config.KeyTTL (a key older than that whose outcome is unknown is never resent:
// ErrKeyExpired), and it makes the call exactly-once, not the database write that follows
// it: record the result with the intent (an outbox), and use Recover's handler to finish
// what a crash interrupted.
package idem
