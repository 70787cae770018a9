package idemtemporal_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/workflow"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtemporal"
)

func info(ns, wf, run, act string, attempt int32) activity.Info {
	return activity.Info{Namespace: ns, WorkflowExecution: workflow.Execution{ID: wf, RunID: run},
		ActivityID: act, Attempt: attempt}
}

func TestStepKey(t *testing.T) {
	base := idemtemporal.StepOf(info("payments", "order-7", "run-1", "5", 1), idemtemporal.ScopeRun)
	key := base.Key()
	u, err := uuid.Parse(key)
	require.NoError(t, err)
	assert.Equal(t, uuid.Version(5), u.Version())
	assert.Equal(t, uuid.NewSHA1(idemtemporal.KeyNamespace, []byte("temporal:payments/order-7/run-1/5")).String(), key)
	assert.Equal(t, "temporal:payments/order-7/run-1/5", base.Intent())
	assert.NoError(t, idem.ValidateKey(key))

	// The attempt number is not part of the step.
	assert.Equal(t, key, idemtemporal.StepOf(info("payments", "order-7", "run-1", "5", 9), idemtemporal.ScopeRun).Key())

	others := map[string]activity.Info{
		"another activity":  info("payments", "order-7", "run-1", "6", 1),
		"another run":       info("payments", "order-7", "run-2", "5", 1),
		"another workflow":  info("payments", "order-8", "run-1", "5", 1),
		"another namespace": info("refunds", "order-7", "run-1", "5", 1),
		// Escaping keeps "/" inside an id from joining two ids into one.
		"a slash moved": info("payments", "order-7/run-1", "", "5", 1),
	}
	for name, in := range others {
		assert.NotEqual(t, key, idemtemporal.StepOf(in, idemtemporal.ScopeRun).Key(), name)
	}

	// ScopeWorkflow: runs of one workflow share the step, activities do not.
	w1 := idemtemporal.StepOf(info("payments", "order-7", "run-1", "pay", 1), idemtemporal.ScopeWorkflow)
	w2 := idemtemporal.StepOf(info("payments", "order-7", "run-2", "pay", 3), idemtemporal.ScopeWorkflow)
	assert.Equal(t, w1, w2)
	assert.Empty(t, w1.RunID)
	assert.NotEqual(t, w1.Key(), idemtemporal.StepOf(info("payments", "order-7", "run-1", "pay", 1), idemtemporal.ScopeRun).Key())
}

// A step too long for an intent gets an intent of the key's length, still one per step.
func TestStepIntentTooLong(t *testing.T) {
	long := strings.Repeat("w", 1000)
	s := idemtemporal.StepOf(info("payments", long, "run-1", "5", 1), idemtemporal.ScopeRun)
	assert.Equal(t, "temporal:sha1:"+s.Key(), s.Intent())
	assert.LessOrEqual(t, len(s.Intent()), idem.MaxIntentLength)
}

func TestNewRefusesBadConfig(t *testing.T) {
	_, err := idemtemporal.New(idemtemporal.Config{})
	assert.ErrorIs(t, err, idemtemporal.ErrNoClient)
	c, err := idem.NewClient(idem.Config{BaseURL: "http://127.0.0.1:1"})
	require.NoError(t, err)
	defer c.Close()
	_, err = idemtemporal.New(idemtemporal.Config{Client: c, Scope: idemtemporal.Scope(7)})
	assert.ErrorContains(t, err, "unknown Scope(7)")
	_, err = idemtemporal.New(idemtemporal.Config{Client: c, ManualRetryDelay: -1})
	assert.ErrorContains(t, err, "negative ManualRetryDelay")
}
