package idemriver

import (
	"context"
	"errors"
	"time"

	"github.com/riverqueue/river"

	"github.com/idemkit/idem"
)

// Defaults of the Worker's waits.
const (
	// DefaultPendingWait: how long a job whose outcome idem left pending (unknown, retries
	// exhausted, budget denied) is snoozed when the server named no wait.
	DefaultPendingWait = 30 * time.Second
	// DefaultManualWait: how long a job held by a manual record (a stored 5xx, an expired
	// key) is snoozed before it looks at the record again.
	DefaultManualWait = 5 * time.Minute
)

// Worker is the River worker of payment jobs (river.AddWorker(workers, &idemriver.Worker{...})).
// Each run sends the job's operation through Client.Do and maps the outcome to River's
// decision (see the package documentation). It is safe for concurrent use.
type Worker struct {
	river.WorkerDefaults[PaymentArgs]

	// Client sends the payment. Its Store should be keystore/pgstore on the application's
	// database, and its LeaseTTL short enough that a job rescued from a dead worker is not
	// kept waiting long for the dead worker's lease. Required: a nil Client fails every run
	// (a plain error: River retries on its schedule; nothing is sent), unless Send is set.
	Client *idem.Client
	// Send, if set, replaces Client.Do for sending the job's operation: for tracing with
	// idemotel, func(ctx, op) { return tracer.Do(ctx, client, op) }, so that the job's span
	// (River's otelriver middleware, say) holds idem's call and attempt spans. It must call
	// Client.Do (or Tracer.Do) with the operation unchanged, and return its result and error.
	Send func(ctx context.Context, op *idem.Operation) (*idem.Result, error)
	// OnSuccess, if set, is called with the answer before the job completes (to mark the
	// order paid, say; the job's ctx). An error makes River retry the job on its own schedule;
	// the retry gets the answer from the keystore without sending, and calls OnSuccess again.
	OnSuccess func(ctx context.Context, job *river.Job[PaymentArgs], res *idem.Result) error
	// OnFailed, if set, is called before the job is cancelled: err is ErrPermanent (the API
	// refused the payment), ErrNotExecuted (resolved as never executed: the application may
	// start a new intent, with a new job), ErrKeyConflict or an invalid operation.
	OnFailed func(ctx context.Context, job *river.Job[PaymentArgs], err error)
	// PendingWait is the snooze of a job idem left pending when the server named no wait
	// (OperationError.RetryAfter). Default DefaultPendingWait (30 s).
	PendingWait time.Duration
	// ManualWait is the snooze of a job held by a manual record. Default DefaultManualWait
	// (5 min). After settling a record (Client.Resolve, idemctl), River's Client.JobRetry
	// runs the job at once instead.
	ManualWait time.Duration
	// JobTimeout is River's timeout for one run (Worker.Timeout); 0 keeps the River
	// client's (one minute by default). Make it longer than the idem policy's MaxElapsed: a
	// run cut short leaves the outcome pending, and the job is snoozed and resumed, but the
	// time is lost.
	JobTimeout time.Duration
}

// Timeout returns JobTimeout (River's per-run timeout; 0: the client's).
func (w *Worker) Timeout(*river.Job[PaymentArgs]) time.Duration { return w.JobTimeout }

// errNoClient is what a run returns when Worker.Client is nil.
var errNoClient = errors.New("idemriver: Worker.Client is nil")

// Work sends the job's payment and returns River's decision: nil (completed), a
// river.JobCancel, a river.JobSnooze, or a plain error for River's retry schedule.
func (w *Worker) Work(ctx context.Context, job *river.Job[PaymentArgs]) error {
	if w.Client == nil && w.Send == nil {
		return errNoClient
	}
	if err := job.Args.check(); err != nil {
		return w.failed(ctx, job, err)
	}
	send := w.Send
	if send == nil {
		send = func(ctx context.Context, op *idem.Operation) (*idem.Result, error) { return w.Client.Do(ctx, op) }
	}
	res, err := send(ctx, job.Args.Operation())
	if err == nil {
		if w.OnSuccess != nil {
			return w.OnSuccess(ctx, job, res)
		}
		return nil
	}
	switch d := decide(ctx, err, w.waits()); d.kind {
	case decideCancel:
		return w.failed(ctx, job, err)
	case decideSnooze:
		return river.JobSnooze(d.wait)
	default:
		return err
	}
}

func (w *Worker) failed(ctx context.Context, job *river.Job[PaymentArgs], err error) error {
	if w.OnFailed != nil {
		w.OnFailed(ctx, job, err)
	}
	return river.JobCancel(err)
}

type waits struct{ pending, manual time.Duration }

func (w *Worker) waits() waits {
	ws := waits{pending: w.PendingWait, manual: w.ManualWait}
	if ws.pending <= 0 {
		ws.pending = DefaultPendingWait
	}
	if ws.manual <= 0 {
		ws.manual = DefaultManualWait
	}
	return ws
}

type decisionKind int

const (
	decideRetry  decisionKind = iota // a plain error: River's schedule (nothing was sent)
	decideCancel                     // never resend
	decideSnooze                     // the same key later; idem asks before resending
)

type decision struct {
	kind decisionKind
	wait time.Duration
}

// decide maps a Do error to River's decision. Order matters: a stored 5xx also matches
// ErrOutcomeUnknown, and must be held as manual, not snoozed as pending.
func decide(ctx context.Context, err error, ws waits) decision {
	var oe *idem.OperationError
	switch {
	case errors.Is(err, idem.ErrStoredServerError), errors.Is(err, idem.ErrKeyExpired):
		return decision{kind: decideSnooze, wait: ws.manual}
	case errors.Is(err, idem.ErrPermanent), errors.Is(err, idem.ErrNotExecuted), errors.Is(err, idem.ErrKeyConflict),
		errors.Is(err, idem.ErrInvalidOperation), errors.Is(err, idem.ErrInvalidPolicy):
		return decision{kind: decideCancel}
	case errors.As(err, &oe):
		if errors.Is(err, idem.ErrCanceled) && errors.Is(ctx.Err(), context.Canceled) {
			return decision{kind: decideSnooze} // River is shutting down: resume at the next start
		}
		if oe.RetryAfter > 0 {
			return decision{kind: decideSnooze, wait: oe.RetryAfter}
		}
		return decision{kind: decideSnooze, wait: ws.pending}
	}
	return decision{kind: decideRetry}
}
