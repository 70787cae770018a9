package idemdbos

import (
	"context"
	"errors"
	"fmt"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/idemkit/idem"
)

// ErrNoClient is returned by New when Config.Client is nil.
var ErrNoClient = errors.New("idemdbos: Config.Client is nil")

// Config configures a Payer.
type Config struct {
	// Client sends the payments. Its Store must be seen by every executor that may recover
	// the workflow (keystore/pgstore, e.g. in DBOS's own database). Required.
	Client *idem.Client
	// App is part of every step's identity: set it when several DBOS applications share one
	// keystore and their workflow ids could meet. Default "".
	App string
}

// Payer sends payments from DBOS steps. It is safe for concurrent use; create one per
// process with the process's idem.Client.
type Payer struct {
	cfg Config
}

// New returns a Payer, or ErrNoClient when cfg.Client is nil.
func New(cfg Config) (*Payer, error) {
	if cfg.Client == nil {
		return nil, ErrNoClient
	}
	return &Payer{cfg: cfg}, nil
}

// Client returns the idem client the Payer sends with (for Resolve and Recover).
func (p *Payer) Client() *idem.Client { return p.cfg.Client }

// Step returns the step running in ctx (see StepOf), under Config.App.
func (p *Payer) Step(ctx context.Context) (Step, error) { return StepOf(ctx, p.cfg.App) }

// RunStep runs one payment as a step of the workflow running in ctx: dbos.RunAsStep with
// the step name name, Retryable as the retry predicate and then stepOpts (which may
// override them), around Do. It returns what Do returned, read back from DBOS's checkpoint
// when the workflow is replayed.
func (p *Payer) RunStep(ctx dbos.Context, name, method, url string, body []byte, opts []idem.OperationOption, stepOpts ...dbos.StepOption) (*idem.Result, error) {
	all := append([]dbos.StepOption{dbos.WithStepName(name), dbos.WithStepRetryPredicate(Retryable)}, stepOpts...)
	return dbos.RunAsStep(ctx, func(ctx context.Context) (*idem.Result, error) {
		return p.Do(ctx, method, url, body, opts)
	}, all...)
}

// Do sends one payment for the step running in ctx, the context DBOS passes to the step's
// function (or one derived from it with dbos.WithTimeout or dbos.WithValue; a plain
// context.Context derived from it is KindInvalid). Never give it the workflow's own context
// outside a step: its step id is then the previous step's, and so would be the key. RunStep
// runs Do in a step of its own.
//
// Do sends method and url (relative to the client's BaseURL) with body, under the step's
// key and intent (Step.Key, Step.Intent), which replace any idem.WithKey or idem.WithIntent
// among opts (a key header given with idem.WithHeader conflicts: KindInvalid). callOpts are
// idem's per-call options.
//
// It returns idem's *idem.Result or an *Error (KindInvalid outside a DBOS step). Run it in
// dbos.RunAsStep with dbos.WithStepRetryPredicate(Retryable).
func (p *Payer) Do(ctx context.Context, method, url string, body []byte, opts []idem.OperationOption, callOpts ...idem.CallOption) (*idem.Result, error) {
	step, err := p.Step(ctx)
	if err != nil {
		return nil, StepError(step, err)
	}
	return p.DoAs(ctx, step, method, url, body, opts, callOpts...)
}

// DoAs is Do under the key of step instead of the running one's: a later step of the
// workflow continues an earlier step's payment, after that step ended with KindManual (or
// with KindRetry once DBOS's retries ran out). The request must be the earlier step's, byte
// for byte (else KindKeyConflict). Until the record is settled it sends nothing for a
// manual record and returns KindManual again. A Step without a WorkflowID (never filled in)
// is refused with KindInvalid (idem.ErrInvalidOperation): every such Step shares one key.
func (p *Payer) DoAs(ctx context.Context, step Step, method, url string, body []byte, opts []idem.OperationOption, callOpts ...idem.CallOption) (*idem.Result, error) {
	if step.WorkflowID == "" {
		// Every Step without a workflow id would share one key: a second order would get
		// the first one's answer replayed, and never be paid.
		return nil, StepError(step, fmt.Errorf("%w: idemdbos: DoAs of a Step without a WorkflowID (a Step never filled in)", idem.ErrInvalidOperation))
	}
	all := append(append([]idem.OperationOption(nil), opts...), idem.WithKey(step.Key()), idem.WithIntent(step.Intent()))
	res, err := p.cfg.Client.Do(ctx, idem.NewOperation(method, url, body, all...), callOpts...)
	if err != nil {
		return nil, StepError(step, err)
	}
	return res, nil
}
