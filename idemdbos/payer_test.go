package idemdbos_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemdbos"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
)

// A process killed at each point around the send: DBOS recovers the workflow in the next
// process, the step runs again under the same key, idem asks the status endpoint before any
// resend, and the ledger holds one charge.
func TestProcessKilledAroundTheSend(t *testing.T) {
	cases := []struct {
		kill       string
		wantChecks int
	}{
		{kill: killBeforeSend, wantChecks: 1}, // not found, then the only send
		{kill: killDuring, wantChecks: 1},     // the status endpoint gives the 201
		{kill: killBeforeIdem, wantChecks: 1}, // the same
		{kill: killBeforeDBOS, wantChecks: 0}, // the keystore answers: nothing sent or asked
	}
	for i, tc := range cases {
		t.Run(tc.kill, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, tc.kill, idemtest.Config{})
			ref := fmt.Sprintf("order-kill-%d", i)
			id, err := h.run("wf-"+ref, order{Reference: ref, Amount: 1000})
			require.NoError(t, err)

			posts, runs, starts := h.snapshot()
			assert.Equal(t, 2, runs, "the killed run and the recovered one")
			assert.Equal(t, 2, starts, "the workflow finished in a new process")
			require.Len(t, h.steps, 2)
			assert.Equal(t, h.steps[0], h.steps[1], "both runs are one step")
			assert.Equal(t, idemdbos.Step{App: "shop", WorkflowID: h.wfID("wf-" + ref), StepID: 0}, h.steps[0])
			key := h.steps[0].Key()
			require.Len(t, posts, 1, "one POST reached the API")
			assert.Equal(t, key, posts[0].key)
			if tc.kill == killBeforeSend {
				assert.Equal(t, 1, posts[0].checks, "the status endpoint was asked before the only send")
			}
			assert.Equal(t, tc.wantChecks, h.api.KeyStatusChecks())
			assert.Equal(t, 1, h.api.ExecutionsByReference(ref), "one charge for the order")
			exec := h.api.Executions()
			require.Len(t, exec, 1)
			assert.Equal(t, exec[0].ID, id)
			assert.Equal(t, key, exec[0].Key)
		})
	}
}

// A 4xx ends the step without a retry and without a resend; the workflow's error, read back
// from DBOS's checkpoint, is still an *idemdbos.Error matching idem.ErrPermanent.
func TestPermanentRefusalEndsWithoutResend(t *testing.T) {
	t.Parallel()
	h := newHarness(t, killNone, idemtest.Config{})
	_, err := h.run("wf-4xx", order{Reference: "order-4xx", Amount: -5})
	var e *idemdbos.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, idemdbos.KindPermanent, e.Kind)
	assert.Equal(t, 400, e.Status)
	assert.ErrorIs(t, err, idem.ErrPermanent)
	posts, runs, _ := h.snapshot()
	assert.Equal(t, 1, runs, "DBOS did not retry the step")
	require.Len(t, posts, 1)
	assert.Equal(t, h.steps[0].Key(), e.Key)
	assert.Equal(t, 0, h.api.ExecutionsByReference("order-4xx"))
}

// A stored 5xx leaves the record manual and the workflow waiting, durably, without sending;
// Client.Resolve settles it and the workflow returns the verdict.
func TestStoredServerErrorWaitsForResolve(t *testing.T) {
	for _, verdict := range []idem.Verdict{idem.VerdictExecuted, idem.VerdictNotExecuted} {
		t.Run(verdict.String(), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, killNone, idemtest.Config{})
			h.api.Script(idemtest.FaultStored500AfterCharge)
			ref := "order-5xx-" + verdict.String()
			type result struct {
				id  string
				err error
			}
			done := make(chan result, 1)
			go func() {
				id, err := h.run("wf-"+ref, order{Reference: ref, Amount: 700})
				done <- result{id, err}
			}()

			// An operator sees the manual record and settles it.
			var c *idem.Client
			var key string
			var rec *keystore.Record
			require.Eventually(t, func() bool {
				h.mu.Lock()
				defer h.mu.Unlock()
				if len(h.steps) == 0 {
					return false
				}
				c, key = h.payer.Client(), h.steps[0].Key()
				r, err := c.Store().Get(context.Background(), "", key)
				rec = r
				return err == nil && r.State == keystore.StateManual
			}, 10*time.Second, 5*time.Millisecond)
			assert.Equal(t, keystore.ReasonStoredServerError, rec.Reason)
			assert.Equal(t, h.steps[0].Intent(), rec.Intent)
			r := idem.Resolution{Verdict: verdict, Note: "ticket 42"}
			if verdict == idem.VerdictExecuted {
				exec := h.api.Executions()
				require.Len(t, exec, 1)
				r.Response = &keystore.Response{StatusCode: 201,
					Body: fmt.Appendf(nil, `{"id":%q,"status":"succeeded"}`, exec[0].ID)}
			}
			_, err := c.Resolve(context.Background(), "", key, r)
			require.NoError(t, err)

			res := <-done
			posts, runs, _ := h.snapshot()
			assert.Len(t, posts, 1, "the stored 5xx was never resent")
			assert.Equal(t, 1, runs, "the payment step ran once; later steps asked the keystore")
			assert.Equal(t, 1, h.api.ExecutionsByReference(ref))
			h.mu.Lock()
			errs := append([]error(nil), h.errs...)
			h.mu.Unlock()
			require.GreaterOrEqual(t, len(errs), 2)
			var e *idemdbos.Error
			require.ErrorAs(t, errs[0], &e)
			assert.Equal(t, idemdbos.KindManual, e.Kind)
			assert.Equal(t, h.steps[0], e.Step)
			assert.ErrorIs(t, errs[0], idem.ErrStoredServerError)

			if verdict == idem.VerdictExecuted {
				require.NoError(t, res.err)
				assert.Equal(t, h.api.Executions()[0].ID, res.id)
				return
			}
			require.ErrorAs(t, res.err, &e)
			assert.Equal(t, idemdbos.KindNotExecuted, e.Kind)
			assert.True(t, errors.Is(res.err, idem.ErrNotExecuted))
		})
	}
}

// RunStep runs the payment in a step of its own: the charge on success, a 4xx not retried
// by DBOS although the step allows three retries.
func TestRunStep(t *testing.T) {
	t.Parallel()
	h := newHarness(t, killNone, idemtest.Config{})
	h.workflow = func(ctx dbos.Context, o order) (string, error) {
		h.mu.Lock()
		p := h.payer
		h.mu.Unlock()
		res, err := p.RunStep(ctx, "pay", http.MethodPost, paymentsPath, body(o), nil,
			dbos.WithStepMaxRetries(3), dbos.WithStepBaseInterval(time.Millisecond))
		if err != nil {
			return "", err
		}
		return chargeID(res)
	}
	id, err := h.run("wf-runstep-ok", order{Reference: "order-runstep", Amount: 500})
	require.NoError(t, err)
	exec := h.api.Executions()
	require.Len(t, exec, 1)
	assert.Equal(t, exec[0].ID, id)
	assert.Equal(t, idemdbos.Step{App: "shop", WorkflowID: h.wfID("wf-runstep-ok"), StepID: 0}.Key(), exec[0].Key)

	h.mu.Lock()
	d := h.dctx
	h.mu.Unlock()
	handle, err := dbos.RunWorkflow(d, h.workflow, order{Reference: "order-runstep-4xx", Amount: -1},
		dbos.WithWorkflowID(h.wfID("wf-runstep-4xx")))
	require.NoError(t, err)
	_, err = handle.GetResult()
	var e *idemdbos.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, idemdbos.KindPermanent, e.Kind)
	posts, _, _ := h.snapshot()
	assert.Len(t, posts, 2, "one POST per workflow: the 4xx was not retried")
}
