package idemstripe

import (
	"github.com/idemkit/idem"
	"github.com/stripe/stripe-go/v82"
)

// Error is what a Stripe call returns when idem ended the operation without handing back an
// answer: an unknown outcome (a stored or replayed 5xx, a dropped connection, a 5xx after
// retries), a key conflict (Stripe's idempotency_error), retries exhausted or stopped
// (a 503 or 429 to the end, Retry-After too long, deadline, budget, cancel).
//
// It unwraps to both sides, so either usual test works:
//   - errors.As(err, &stripeErr) with stripeErr *stripe.Error finds Stripe's answer,
//     decoded as stripe-go decodes it (Type, Code, HTTPStatusCode, and Err: a
//     *stripe.IdempotencyError for idempotency_error, *stripe.APIError for api_error),
//     when the operation's last answer was a Stripe v1 error body: a stored 500, an
//     idempotency_error, the last 503 or 429. Stripe nil otherwise (no answer came).
//   - errors.Is(err, idem.ErrOutcomeUnknown), idem.ErrStoredServerError, idem.ErrKeyConflict,
//     idem.ErrExhausted, ... and errors.As(err, &opErr) with opErr *idem.OperationError see
//     idem's verdict, through Err (stripe-go's *url.Error around the *idem.OperationError).
//
// Answers idem hands back as responses are not wrapped: a 2xx is the result, and a 4xx the
// server decided (a card declined, invalid parameters: idem's ErrPermanent, the record
// failed, never resent) is stripe-go's own *stripe.Error, as without idem. Invalid input
// (idem.ErrInvalidOperation: a body over the transport's limit, a bad key) and a keystore
// failure before the first send are not wrapped either: stripe-go returns them in a
// *url.Error.
type Error struct {
	// Stripe is Stripe's error answer for the key, or nil when none came (or the body is no
	// Stripe error). For ErrStoredServerError it is the stored 5xx.
	Stripe *stripe.Error
	// Op is idem's verdict (also reachable through Err).
	Op *idem.OperationError
	// Err is the error stripe-go returned: a *url.Error wrapping Op.
	Err error
}

// Error describes both: idem's verdict, then Stripe's answer when there is one.
func (e *Error) Error() string {
	s := "idemstripe: operation error"
	if e.Op != nil {
		s = "idemstripe: " + e.Op.Error()
	}
	if e.Stripe != nil {
		s += "; stripe: " + e.Stripe.Error()
	}
	return s
}

// Unwrap returns the Stripe error (when there is one) and stripe-go's error, which wraps
// the *idem.OperationError.
func (e *Error) Unwrap() []error {
	if e.Stripe != nil {
		return []error{e.Stripe, e.Err}
	}
	return []error{e.Err}
}
