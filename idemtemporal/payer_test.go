package idemtemporal_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtemporal"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
)

// payWorkflow pays one order in one activity, retried by Temporal's default-shaped policy.
func payWorkflow(ctx workflow.Context, o order) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		HeartbeatTimeout:    20 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 10 * time.Second, BackoffCoefficient: 2,
			MaximumAttempts: 5},
	})
	var id string
	err := workflow.ExecuteActivity(ctx, "Pay", o).Get(ctx, &id)
	return id, err
}

// run executes payWorkflow for o in Temporal's test environment with the harness's activity;
// before runs on the environment first (delayed callbacks).
func run(t *testing.T, h *harness, o order, before func(*testsuite.TestWorkflowEnvironment)) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(payWorkflow)
	env.RegisterActivity(h.Pay)
	if before != nil {
		before(env)
	}
	env.ExecuteWorkflow(payWorkflow, o)
	require.True(t, env.IsWorkflowCompleted())
	return env
}

// A worker killed at each point around the send: the next attempt, on a new worker, sends
// the same key, asks the status endpoint before any resend, and the ledger holds one charge.
func TestWorkerKilledAroundTheSend(t *testing.T) {
	cases := []struct {
		kill       string
		wantPosts  int // POSTs that reached the API
		wantChecks int // status checks, all made before any resend
		wantResent bool
	}{
		// The first attempt never left: the status endpoint says not found, then one send.
		{kill: killBeforeSend, wantPosts: 1, wantChecks: 1, wantResent: false},
		// The API executed after the worker died: the status endpoint gives the 201.
		{kill: killDuring, wantPosts: 1, wantChecks: 1},
		// The 201 arrived and was lost with the worker: the status endpoint gives it again.
		{kill: killBeforeIdem, wantPosts: 1, wantChecks: 1},
		// idem recorded the 201: the keystore answers, nothing is sent or asked.
		{kill: killBeforeTemp, wantPosts: 1, wantChecks: 0},
	}
	for i, tc := range cases {
		t.Run(tc.kill, func(t *testing.T) {
			h := newHarness(t, tc.kill, idemtest.Config{})
			ref := fmt.Sprintf("order-kill-%d", i)
			env := run(t, h, order{Reference: ref, Amount: 1000}, nil)
			require.NoError(t, env.GetWorkflowError())
			var id string
			require.NoError(t, env.GetWorkflowResult(&id))

			posts, attempts, starts := h.snapshot()
			assert.Equal(t, 2, attempts, "one attempt killed, one retry")
			assert.Equal(t, 2, starts, "the retry ran on a new worker")
			require.Len(t, h.steps, 2)
			assert.Equal(t, h.steps[0], h.steps[1], "both attempts are one step")
			key := h.steps[0].Key()
			require.Len(t, posts, tc.wantPosts)
			for _, p := range posts {
				assert.Equal(t, key, p.key, "every POST carries the step's key")
			}
			if tc.kill == killBeforeSend {
				assert.Equal(t, 1, posts[0].checks, "the status endpoint was asked before the only send")
			}
			assert.Equal(t, tc.wantChecks, h.api.KeyStatusChecks())
			assert.Equal(t, 1, h.api.ExecutionsByReference(ref), "one charge for the order")
			exec := h.api.Executions()
			require.Len(t, exec, 1)
			assert.Equal(t, exec[0].ID, id, "the workflow got the charge")
			assert.Equal(t, key, exec[0].Key)
		})
	}
}

// A 4xx ends the activity at once: non-retryable, nothing resent, nothing charged.
func TestPermanentRefusalEndsWithoutResend(t *testing.T) {
	h := newHarness(t, killNone, idemtest.Config{})
	env := run(t, h, order{Reference: "order-4xx", Amount: -5}, nil)
	err := env.GetWorkflowError()
	require.Error(t, err)
	var app *temporal.ApplicationError
	require.ErrorAs(t, err, &app)
	assert.Equal(t, idemtemporal.TypePermanent, app.Type())
	assert.True(t, app.NonRetryable())
	var d idemtemporal.Details
	require.NoError(t, app.Details(&d))
	posts, attempts, _ := h.snapshot()
	assert.Equal(t, 1, attempts, "no retry")
	require.Len(t, posts, 1)
	assert.Equal(t, h.steps[0].Key(), d.Key)
	assert.Equal(t, 400, d.Status)
	assert.Equal(t, 0, h.api.ExecutionsByReference("order-4xx"))
}

// A stored 5xx leaves the record manual; the activity retries after ManualRetryDelay without
// sending, and the first attempt after Client.Resolve returns the verdict.
func TestStoredServerErrorWaitsForResolve(t *testing.T) {
	for _, verdict := range []idem.Verdict{idem.VerdictExecuted, idem.VerdictNotExecuted} {
		t.Run(verdict.String(), func(t *testing.T) {
			h := newHarness(t, killNone, idemtest.Config{})
			h.api.Script(idemtest.FaultStored500AfterCharge)
			ref := "order-5xx-" + verdict.String()
			var manual *keystore.Record
			env := run(t, h, order{Reference: ref, Amount: 700}, func(env *testsuite.TestWorkflowEnvironment) {
				// An operator, half an hour later, finds the record and settles it.
				env.RegisterDelayedCallback(func() {
					h.mu.Lock()
					defer h.mu.Unlock()
					c := h.worker().Client()
					key := h.steps[0].Key()
					rec, err := c.Store().Get(context.Background(), "", key)
					require.NoError(t, err)
					manual = rec
					r := idem.Resolution{Verdict: verdict, Note: "ticket 42"}
					if verdict == idem.VerdictExecuted {
						exec := h.api.Executions()
						require.Len(t, exec, 1)
						r.Response = &keystore.Response{StatusCode: 201,
							Body: fmt.Appendf(nil, `{"id":%q,"status":"succeeded"}`, exec[0].ID)}
					}
					_, err = c.Resolve(context.Background(), "", key, r)
					require.NoError(t, err)
				}, 30*time.Minute)
			})

			require.NotNil(t, manual)
			assert.Equal(t, keystore.StateManual, manual.State)
			assert.Equal(t, keystore.ReasonStoredServerError, manual.Reason)
			posts, attempts, _ := h.snapshot()
			assert.Len(t, posts, 1, "the stored 5xx was never resent")
			assert.Equal(t, 2, attempts, "one attempt before the verdict, one after")
			assert.Equal(t, 1, h.api.ExecutionsByReference(ref))
			var app *temporal.ApplicationError
			require.ErrorAs(t, h.errs[0], &app)
			assert.Equal(t, idemtemporal.TypeManual, app.Type())
			assert.False(t, app.NonRetryable())
			assert.Equal(t, idemtemporal.DefaultManualRetryDelay, app.NextRetryDelay())

			if verdict == idem.VerdictExecuted {
				require.NoError(t, env.GetWorkflowError())
				var id string
				require.NoError(t, env.GetWorkflowResult(&id))
				assert.Equal(t, h.api.Executions()[0].ID, id)
				return
			}
			err := env.GetWorkflowError()
			require.ErrorAs(t, err, &app)
			assert.Equal(t, idemtemporal.TypeNotExecuted, app.Type())
			assert.True(t, app.NonRetryable())
			assert.True(t, errors.Is(h.errs[1], idem.ErrNotExecuted))
		})
	}
}
