// Package outcome says what an attempt's answer means to idem: the Class of each attempt
// (success, retry, unknown, in progress, key conflict, permanent, stored server error),
// the classifiers that decide it (DefaultClassifiers: replays, Stripe-Should-Retry, transport
// errors, status codes), the key-reuse rule (a 422 or 400 naming the idempotency key),
// Retry-After parsing (RFC 9110 §10.2.3), what a status endpoint says about a key
// (KeyStatus), and where a final answer came from (Source).
//
// idem (github.com/idemkit/idem) imports this package and sets Config.Classifiers and
// Config.KeyStatusFunc from it; this package imports nothing of idem.
package outcome
