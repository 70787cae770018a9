// Package idemtemporal sends a payment from a Temporal activity through idem, under an
// idempotency key derived from Temporal's own identity of the step, and turns idem's outcome
// into Temporal's retry decision.
//
// # The step and its key
//
// Temporal runs an activity at least once: it retries a failed attempt, and it retries one
// whose worker died (after the heartbeat or start-to-close timeout) without knowing whether
// the payment left. Temporal's documentation leaves the idempotency of the call to the
// called service and suggests the workflow run id plus the activity id as its key. [Step]
// is that identity: the namespace, the workflow id, the run id and the activity id (never
// the attempt number). Every attempt of the activity, on any worker, after any number of
// worker restarts, has the same Step, hence the same key ([Step.Key], a name-based UUID,
// RFC 9562 §5.5, over [Step.Intent]) and the same idem intent. Another activity of the run,
// or the same activity in another run (a workflow retry, a reset, a continue-as-new), is
// another step and pays under another key. [ScopeWorkflow] drops the run id, for workflows
// whose id is the business payment and whose activity ids are set explicitly
// (ActivityOptions.ActivityID): a new run of that workflow id then finds the payment made.
//
// The key is derived from the identity, never from the payload: two identical payments in
// two steps are two payments.
//
// # Outcomes and Temporal's retries
//
// [Payer.Do] returns idem's *idem.Result, or an error made for Temporal's retry policy
// ([ActivityError]); every such error is a *temporal.ApplicationError of one of the types
// below, with [Details] (the key, the scope, the intent, the last HTTP status):
//
//   - outcome unknown, retries exhausted, budget empty, cancelled, a worker's lease lost,
//     a store that failed before the send: [TypeRetry], retryable. The next attempt uses the
//     same key and idem asks the status endpoint before it resends anything. A Retry-After
//     longer than the client's cap becomes the attempt's NextRetryDelay, so that Temporal's
//     durable timer waits it out instead of a worker.
//   - a permanent refusal (a 4xx: ErrPermanent): [TypePermanent], non-retryable.
//   - key reuse (422, ErrKeyConflict): [TypeKeyConflict], non-retryable. It says nothing of
//     the payment that holds the key; the workflow must not pay again because of it.
//   - resolved as not executed (ErrNotExecuted): [TypeNotExecuted], non-retryable: only now
//     may the workflow pay again, in another step.
//   - a stored 5xx or an expired key (ErrStoredServerError, ErrKeyExpired): the record is
//     manual and waits for a person or Config.Lookup. [TypeManual], retryable after
//     Config.ManualRetryDelay (1 hour by default). Such a retry sends nothing: idem answers
//     from the keystore (or asks the business lookup), so the activity stays open, visible
//     with its key, and finishes by itself on the first attempt after Client.Resolve
//     settled the record. A non-retryable error would end the activity, and a new activity
//     would be another step with another key: the workflow would need idem's key to find the
//     record again. An activity whose retry policy runs out (MaximumAttempts,
//     ScheduleToCloseTimeout) ends with [TypeManual]; the record stays manual in the
//     keystore, where an operator sees it (idemctl) and settles it.
//   - invalid input (ErrInvalidOperation, ErrInvalidPolicy, ErrInvalidConfig):
//     [TypeInvalid], non-retryable.
//
// # Heartbeats
//
// idem may wait inside Do: a Retry-After up to Policy.MaxRetryAfter, a backoff, a 409, a
// slow attempt. idem's hooks are client-wide and carry no activity context, so Payer.Do
// heartbeats on a ticker while the call runs (Config.HeartbeatInterval; by default a third
// of the activity's HeartbeatTimeout), with [Details] of the call's key. A worker that dies
// stops heartbeating, and Temporal retries the activity after its HeartbeatTimeout rather
// than its whole StartToCloseTimeout.
//
// # What idem's keystore still does
//
// Temporal persists the step's identity, so the key survives any worker's death without
// idem's help. The keystore record still matters: it says whether the key may have been sent
// (so that a retry asks the status endpoint before resending), when it was created (a key
// older than the server's retention is never resent: ErrKeyExpired), and what the answer
// was (a retry after the answer arrived sends nothing). Temporal may run the next attempt on
// another worker host, so the keystore must be shared by the workers: keystore/pgstore,
// whose leases also keep two workers from sending one key at once when Temporal starts an
// attempt while a presumed-dead one still runs. The retry budget stays per client, and
// Client.Recover still reconciles records whose activity will never run again (its retry
// policy ran out, its workflow was terminated).
package idemtemporal
