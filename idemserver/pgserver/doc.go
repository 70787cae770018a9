// Package pgserver is an idemserver.Backend on PostgreSQL (pgx v5) where the key claim, the
// handler's business writes and the stored answer commit in ONE transaction.
//
// For each keyed request the backend opens a transaction, takes an advisory lock on the key's
// scope (pg_try_advisory_xact_lock, and the same lock at session level until the answer
// commits: a second request with the key gets 409 at once instead of queueing), inserts the
// processing row, and hands the transaction to the
// handler through the request context (Tx). The handler does its business writes (and, for
// example, an outbox row) in that transaction; the middleware then writes the answer into the
// row and commits. A crash at any point (process killed, connection lost, panic, commit
// failure) rolls back all three together: the key is free again and a retry executes once.
// Nothing is visible to other requests until the commit, and nothing reaches the client
// before it.
//
// Each request in flight holds one pool connection until its answer commits: size the pool
// for the executions you want in parallel. Connect to PostgreSQL directly or through a pooler
// in session mode: a claim holds the key's advisory lock at session level, which a pooler in
// transaction mode (PgBouncer's pool_mode=transaction) would leave on a server connection,
// holding the key (409) until that connection closes. pgx's simple protocol works. The handler never commits or rolls back the claim's
// transaction itself (the middleware does, with the answer); a statement that may fail (a
// unique violation it expects) runs in a savepoint (tx.Begin), rolled back when it fails, so the
// transaction stays usable. A handler that ends with the transaction aborted gets 503 and
// nothing is stored; so does one with a statement that failed before reaching PostgreSQL (its
// context already done, an argument that cannot be encoded), which would otherwise commit the
// handler's other writes without it (ErrStatementFailed).
//
// A fresh key costs five statements in three round trips, the handler's one INSERT included:
// BEGIN and the claim, pipelined (one statement takes the key's advisory locks, inserts its
// row unless one exists, and reads the row a stored answer is replayed from); the handler's
// own statements; the answer and COMMIT, pipelined (one statement checks that the open
// transaction is still the claim's and that the answer's UPDATE changed the claim's own row,
// and fails otherwise, so that the COMMIT behind it is skipped). A replay is BEGIN and the
// claim, then ROLLBACK and the unlock: four statements in two round trips. A key whose row is
// not a final stored answer (an expired one, a checkpoint) is read once more after the lock.
// TestStatementsPerRequest counts them on the wire. These counts hold in pgx's default
// query mode (cache_statement) and the other cached ones; with default_query_exec_mode=
// describe_exec every statement is described first, one more round trip each (a fresh key
// then takes six round trips, a replay three).
//
// # Clocks
//
// Expiry and leases are judged by the middleware's clock (idemserver.Config.Now), and the
// instants stored (created_at, locked_until, expires_at) come from it too. In a fleet of API
// servers sharing one database, a server whose clock is ahead would treat a completed key as
// expired and execute its retry again (a double charge), take over a checkpointed row whose
// lease has not passed, and purge the others' answers early; one whose clock is behind would
// store instants that make the others do the same. So Claim, Lookup and Purge compare the
// middleware's clock with the database's (clock_timestamp(), read in the claim's existing
// batch: no extra round trip) and refuse with ErrClockSkew beyond Options.MaxClockSkew (5 s by
// default): the claim rolls back (503 with Retry-After, nothing executed, the key untouched),
// the purge deletes nothing. Checkpoint and Complete do not check again: they run within the
// request whose claim passed.
//
// # Recovery points (calls to third parties)
//
// A handler that must call a third party mid-request (a card network) cannot roll that call
// back. It splits its work into atomic phases, as in Brandur Leach's Postgres design for
// Stripe-like idempotency keys ("Implementing Stripe-like Idempotency Keys in Postgres"):
//
//	switch idemserver.RecoveryPoint(r) {
//	case "": // phase 1: local writes (the payment row, state "pending")
//		insertPayment(tx)
//		idemserver.Checkpoint(r, "payment_created") // commits phase 1, opens a new transaction
//		fallthrough
//	case "payment_created": // phase 2: the foreign call, then record its result
//		charge := network.Charge(ctx, key) // the third party's own idempotency key: derive it from ours
//		updatePayment(pgserver.Tx(ctx), charge)
//	}
//	// the answer commits with phase 2
//
// Checkpoint commits the work so far together with recovery_point, leaves the row processing
// with locked_until = now + Config.Lease, and opens a new transaction for the next phase. The
// point must not be empty: "" is what RecoveryPoint returns for a fresh start, and Checkpoint
// refuses it (idemserver.ErrEmptyRecoveryPoint) without committing anything. If the process
// dies after a checkpoint, the row stays processing: requests with the key get 409 until the
// lease passes, then the next one takes it over and RecoveryPoint tells its handler where to
// resume. The takeover commits the row's new owner and locked_until = now + Config.Lease on
// its own (three more round trips) before that handler runs: if the resumed request dies too,
// the key is again in progress until its lease passes, never resumed at once while the dead
// request's third-party call may still be settling. A phase must therefore be safe to re-run
// from its start: local writes roll back; the foreign call must carry its own idempotency key.
// Handlers without third-party calls never checkpoint and need none of this.
//
// # Timeouts
//
// A deadline for the handler wraps the middleware, never the other way round:
//
//	mux.Handle("POST /v1/payments", http.TimeoutHandler(mw.Handler(pay), 10*time.Second, "timeout")) // right
//	mux.Handle("POST /v1/payments", mw.Handler(http.TimeoutHandler(pay, 10*time.Second, "timeout"))) // wrong
//
// http.TimeoutHandler answers at its deadline and returns while the handler it wraps runs on in
// its own goroutine. Wrapped by the middleware, its 503 is what the middleware takes for the
// handler's answer: it stores it as the key's answer (every retry replays the timeout) and
// commits the claim's transaction with the writes the handler made so far, a debit without
// its credit. The handler's later statements through Tx then fail (pgx.ErrTxClosed), too late;
// those through its Conn run in whatever request the pooled connection serves next. This
// cannot be detected in general: a handler between two statements looks like one that has
// finished. Only a statement still running at that moment is caught (ErrHandlerStillRunning:
// rolled back, 503, nothing stored). Wrapping the middleware, the timeout's 503 goes to the
// client while the middleware waits for the handler to return: the request's context ends at
// the deadline, so a statement run with it fails and the claim rolls back (ErrStatementFailed:
// nothing stored, and the retry runs the handler once), or the handler finishes and its answer
// is stored and replayed to the retry. The same holds for any wrapper that answers while the
// handler still runs, and for goroutines a handler leaves behind with its Tx.
package pgserver
