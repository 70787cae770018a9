package idemtemporal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/idemkit/idem"
)

// DefaultHeartbeatInterval is how often Payer.Do heartbeats when the activity has no
// HeartbeatTimeout and Config.HeartbeatInterval is 0. Heartbeats are how a worker learns
// that its activity was cancelled, so Do sends them even without a timeout to keep.
const DefaultHeartbeatInterval = 10 * time.Second

// ErrNoClient is returned by New when Config.Client is nil.
var ErrNoClient = errors.New("idemtemporal: Config.Client is nil")

// Config configures a Payer.
type Config struct {
	// Client sends the payments. Its Store should be shared by every worker that may run
	// the activity (keystore/pgstore): Temporal may retry it on another host. Required.
	Client *idem.Client
	// Scope picks the identifiers of a step: ScopeRun (the default) or ScopeWorkflow.
	Scope Scope
	// HeartbeatInterval is how often Do heartbeats while idem works. 0 means a third of the
	// activity's HeartbeatTimeout, or DefaultHeartbeatInterval when it has none; negative
	// turns the ticker off (Do still heartbeats once before the call).
	HeartbeatInterval time.Duration
	// ManualRetryDelay is how long Temporal waits before retrying an activity whose record
	// is manual (TypeManual). 0 means DefaultManualRetryDelay (1 hour).
	ManualRetryDelay time.Duration
}

// Payer sends payments from activities. It is safe for concurrent use by any number of
// activities; create one per worker with the worker's idem.Client.
type Payer struct {
	cfg Config
}

// New returns a Payer. It returns ErrNoClient when cfg.Client is nil, and an error for an
// unknown Scope or a negative ManualRetryDelay.
func New(cfg Config) (*Payer, error) {
	if cfg.Client == nil {
		return nil, ErrNoClient
	}
	if cfg.Scope != ScopeRun && cfg.Scope != ScopeWorkflow {
		return nil, fmt.Errorf("idemtemporal: unknown %v", cfg.Scope)
	}
	if cfg.ManualRetryDelay < 0 {
		return nil, fmt.Errorf("idemtemporal: negative ManualRetryDelay %v", cfg.ManualRetryDelay)
	}
	return &Payer{cfg: cfg}, nil
}

// Client returns the idem client the Payer sends with (for Resolve and Recover).
func (p *Payer) Client() *idem.Client { return p.cfg.Client }

// Step returns the step of the activity running in ctx, under the Payer's scope. ctx must be
// an activity's context (activity.GetInfo panics otherwise; Do checks first).
func (p *Payer) Step(ctx context.Context) Step {
	return StepOf(activity.GetInfo(ctx), p.cfg.Scope)
}

// Do sends one payment for the activity running in ctx: method and url (relative to the
// client's BaseURL) with body, under the step's key and intent (Step.Key, Step.Intent),
// which replace any idem.WithKey or idem.WithIntent among opts (a key header given with
// idem.WithHeader conflicts: TypeInvalid). callOpts are idem's per-call options. It
// heartbeats while the call runs (see Config.HeartbeatInterval).
//
// It returns idem's *idem.Result, or the error ActivityError makes of idem's: return it
// from the activity as it is. Outside an activity it returns an error of TypeInvalid.
func (p *Payer) Do(ctx context.Context, method, url string, body []byte, opts []idem.OperationOption, callOpts ...idem.CallOption) (*idem.Result, error) {
	if ctx == nil || !activity.IsActivity(ctx) {
		return nil, ActivityError(fmt.Errorf("%w: idemtemporal: Do outside an activity", idem.ErrInvalidOperation), 0)
	}
	step := p.Step(ctx)
	key := step.Key()
	all := append(append([]idem.OperationOption(nil), opts...), idem.WithKey(key), idem.WithIntent(step.Intent()))
	op := idem.NewOperation(method, url, body, all...)

	stop := p.heartbeat(ctx, Details{Key: key, Intent: step.Intent()})
	res, err := p.cfg.Client.Do(ctx, op, callOpts...)
	stop()
	if err != nil {
		return nil, ActivityError(err, p.cfg.ManualRetryDelay)
	}
	return res, nil
}

// heartbeat records one heartbeat now and then one per interval until the returned stop is
// called; stop returns once the ticker's goroutine has ended.
func (p *Payer) heartbeat(ctx context.Context, d Details) (stop func()) {
	activity.RecordHeartbeat(ctx, d)
	every := p.cfg.HeartbeatInterval
	if every == 0 {
		every = DefaultHeartbeatInterval
		if t := activity.GetInfo(ctx).HeartbeatTimeout; t > 0 {
			every = t / 3
		}
	}
	if every < 0 {
		return func() {}
	}
	if every < time.Millisecond { // a HeartbeatTimeout of a few nanoseconds: a ticker needs > 0
		every = time.Millisecond
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx, d)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
