// Package idemdbos sends a payment from a DBOS step (github.com/dbos-inc/dbos-transact-golang)
// through idem, under an idempotency key derived from DBOS's identity of the step, and tells
// DBOS's step retries which of idem's outcomes to retry.
//
// # The step and its key
//
// DBOS runs a step at least once: it checkpoints the step's output in its system database
// after the step returns, and a workflow recovered after its process died runs again from
// the start, replaying checkpointed steps and running the others again. The step that was
// interrupted runs again under the same workflow id and the same step id (step ids are the
// order of the workflow's steps, which must be deterministic). [Step] is that identity, with
// an optional application name (Config.App) for keystores shared by several DBOS
// applications whose workflow ids could meet. [Step.Key] is a name-based UUID (RFC 9562
// §5.5) over [Step.Intent]; the same step gets the same key in every execution of it, on
// any executor; another step, or another workflow (a fork, a new workflow for the same
// order), gets another key. A fork that starts before the payment step pays again under a
// new key: fork from a step after it.
//
// # Outcomes and DBOS's retries
//
// [Payer.Do] runs inside a step ([Payer.RunStep] makes the step) and returns idem's *idem.Result, or an *[Error] whose Kind
// says what became of the payment. Pass [Retryable] to dbos.WithStepRetryPredicate: DBOS
// retries the step (in the same execution, under the same key, idem asking the status
// endpoint before any resend) only for [KindRetry]. Every other kind is checkpointed as the
// step's error, which the workflow reads with errors.As, in the first execution and in
// every replay alike (the type is registered with encoding/gob, as DBOS stores Go errors).
//
//   - [KindRetry]: outcome unknown, retries or budget exhausted, cancelled: the payment
//     may or may not have been made. Retryable. If DBOS's retries run out, the record stays
//     pending and [Payer.DoAs] in a later step, or Client.Recover, finishes it.
//   - [KindPermanent] (a 4xx), [KindKeyConflict] (422 key reuse), [KindNotExecuted]
//     (resolved as not executed: only now may the workflow pay again, in another step),
//     [KindInvalid]: final.
//   - [KindManual]: a stored 5xx or an expired key; the record waits for a person or
//     Config.Lookup. DBOS's step retries are in-memory sleeps of one execution, unsuited
//     to a wait of hours, so the step ends: the workflow waits durably (dbos.Sleep, or
//     dbos.Recv for an operator's message) and asks again in a later step with
//     [Payer.DoAs] and the Step the error carries. That call sends nothing: idem answers
//     from the keystore until Client.Resolve has settled the record, then returns the
//     verdict. Nothing is lost meanwhile: the record is manual in the keystore, where
//     idemctl shows it, and the workflow is pending in DBOS.
//
// # What idem's keystore still does
//
// DBOS persists the workflow's progress, so the step's key survives any process's death
// without idem. The keystore record still matters: it says whether the key may have been
// sent (so that the step's next run asks the status endpoint before resending), how old
// the key is (never resent past the server's retention: ErrKeyExpired), and what the answer
// was (a step that died after the answer arrived and before DBOS checkpointed it sends
// nothing again). On PostgreSQL, DBOS's database can hold the keystore too
// (keystore/pgstore, in its own schema): every executor that may recover the workflow
// must see the record. pgstore's leases keep two executors from sending one key at once
// (DBOS may recover a workflow on another executor while a presumed-dead one still runs);
// the retry budget stays per client; Client.Recover reconciles records whose workflow will
// not run again (cancelled, or its step's error checkpointed after DBOS's retries ran out).
package idemdbos
