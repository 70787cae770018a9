// Package idemstripe runs the official Stripe client (github.com/stripe/stripe-go/v82) over
// idem, so that a PaymentIntent, a refund or any other POST is sent under one idempotency key
// persisted before the first send, retried only by idem's policy, checked after an unknown
// outcome, and answered from idem's store when the same intent is asked again, also after a
// restart.
//
// New returns a *Client: the embedded *stripe.Client (c.V1PaymentIntents.Create, ...), its
// stripe-go Backends, and the idem client (c.Idem) with the store and Recover. What it does
// that plain stripe-go over idem.NewHTTPClient does not:
//
//   - stripe-go's own retries are off (MaxNetworkRetries 0; SetMaxNetworkRetries is
//     ignored), so one call sends a key at most Config.Idem.Policy.MaxAttempts times (two
//     stripe-go retries on top of idem's five sent one key 15 times).
//   - The key on the wire: the caller's own (params.IdempotencyKey, or Idempotency-Key in
//     params.Headers), which idem adopts and persists; else, when the call's context names
//     an intent (WithIntent, idem.ContextWithIntent), the key idem persisted for that intent,
//     on every call and after a restart; else one idem mints. stripe-go v82 mints a random
//     key for every POST (and PUT, PATCH, DELETE) without params.IdempotencyKey; that key is
//     dropped before idem sees a POST or PATCH, so a second call of an intent is no
//     ErrKeyConflict. DELETE is sent by idem as a safe request, stripe-go's key kept.
//   - An error of idem's reaches the caller as *Error, which unwraps both to Stripe's answer
//     (*stripe.Error, when one came: a stored 500, an idempotency_error) and to idem's
//     verdict (*idem.OperationError and the sentinels: idem.ErrOutcomeUnknown,
//     idem.ErrStoredServerError, idem.ErrKeyConflict, idem.ErrExhausted, ...). A success and
//     a 4xx Stripe decided (a declined card) come back as stripe-go returns them.
//   - The secret key is idem's Config.Credentials (Authorization: Bearer <key>), so that
//     Recover and a resumed intent resend with it after a restart; it is never persisted.
//   - client_secret, and Config.RedactFields, are replaced by null in the responses idem
//     stores (the caller gets the real body), so that no PaymentIntent's secret stays in
//     the keystore for the records' retention.
//
// What a caller does with the outcome (see idem's README for the contract). Test idem's
// verdicts first: an *Error also unwraps to a *stripe.Error (the last 503, a stored 500),
// which alone says nothing of whether the payment was made.
//
//	pi, err := sc.V1PaymentIntents.Create(idemstripe.WithIntent(ctx, order.ID), params)
//	var ie *idemstripe.Error
//	var se *stripe.Error
//	switch {
//	case err == nil: // created, or answered from idem's store for this intent
//	case errors.Is(err, idem.ErrNotExecuted): // settled as not created: a new intent may pay
//	case errors.Is(err, idem.ErrKeyConflict): // a bug: the intent's key was used with other params
//	case errors.As(err, &ie): // unknown, stored 5xx, retries used up, ...: the record stays
//		// pending or manual; call again with the same intent later, or reconcile. Never pay
//		// again under a new intent.
//	case errors.As(err, &se): // Stripe decided (card_error, invalid_request_error): not created
//	}
package idemstripe
