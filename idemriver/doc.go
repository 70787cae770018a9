// Package idemriver is a transactional outbox for payments on River (riverqueue.com, with
// the riverpgxv5 driver): the payment intent is inserted as a River job inside the
// application's own business transaction, and a Worker sends it through idem's Client.Do.
//
//	tx, _ := pool.Begin(ctx)
//	// ... INSERT INTO orders ... (the application's own writes)
//	args, _ := idemriver.NewPayment("order-42", http.MethodPost, "/v1/payments", body)
//	_, err := idemriver.InsertTx(ctx, riverClient, tx, args, nil)
//	tx.Commit(ctx) // the order and its payment job exist together, or neither does
//
// # The key
//
// NewPayment mints the idempotency key (a UUIDv7) when the intent is inserted and stores it
// in the job's args (PaymentArgs.Key). River never changes a job's args, so the key is the
// same at every run of the job: River's retries and snoozes, a run after the rescuer found a
// dead worker's job, a run on another host. A new intent is a new insert, hence a new key.
// The key is never derived from the payload (two real payments of the same amount to the
// same customer must stay two) nor from the job id (ids restart with a restored or rebuilt
// table; a key is a promise to the API that outlives it). The business reference
// (PaymentArgs.Reference, the order id) is also the idem intent, so that a second job
// inserted for the same order by mistake is sent under the first job's key, never charged
// twice.
//
// # The keystore: pgstore on the same database
//
// The job row holds the intent and its key; idem's record (keystore/pgstore) holds what
// happened to them: persisted before the first byte is sent, with the attempts made, the
// stored answer, a lease that fences two workers running the same job (River's rescuer can
// start a job again while a slow worker still runs it), and the manual state of a stored
// 5xx, which idemctl lists and Client.Resolve settles. Keeping that state in the job row
// instead would mean writing the row while River's own executor and completer write it; and
// River prunes finished jobs, while a payment's record must outlive its retries. Both live
// in one PostgreSQL database: one backup, one failure domain; an order that committed its
// job can always reach its payment record.
//
// # River's decisions from idem's outcomes
//
// Work maps Client.Do's outcome to what River does with the job:
//
//   - success: the job completes (after Worker.OnSuccess, if set; its error makes River
//     retry, and the retry finds the answer in the keystore: nothing is sent again);
//   - ErrPermanent, ErrNotExecuted, ErrKeyConflict, invalid input: river.JobCancel, never
//     resent (Worker.OnFailed is told first);
//   - a stored 5xx or an expired key (ErrStoredServerError, ErrKeyExpired: the record is
//     manual): river.JobSnooze(Worker.ManualWait), again and again, until a business lookup
//     (idem.Config.Lookup) or a person (idemctl, Client.Resolve) settles the record; the next
//     run then completes or cancels the job without sending;
//   - any other *idem.OperationError (outcome unknown, retries exhausted, budget denied,
//     Retry-After beyond the cap, deadline, lease lost): river.JobSnooze with idem's wait
//     (OperationError.RetryAfter, the server's Retry-After) or Worker.PendingWait. A snooze
//     does not count as one of River's attempts, so such a job is never discarded; the next
//     run resumes the same key and idem asks the status endpoint before resending;
//   - a context cancelled by River's shutdown: river.JobSnooze(0), resumed at the next start;
//   - any other error (the keystore failing before the first send: nothing was sent): returned,
//     so River retries on its own schedule.
package idemriver
