package idemdbos_test

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemdbos"
)

func TestStepKey(t *testing.T) {
	s := idemdbos.Step{App: "shop", WorkflowID: "order-7", StepID: 2}
	key := s.Key()
	u, err := uuid.Parse(key)
	require.NoError(t, err)
	assert.Equal(t, uuid.Version(5), u.Version())
	assert.Equal(t, "dbos:shop/order-7/2", s.Intent())
	assert.Equal(t, uuid.NewSHA1(idemdbos.KeyNamespace, []byte("dbos:shop/order-7/2")).String(), key)
	for name, o := range map[string]idemdbos.Step{
		"another step":     {App: "shop", WorkflowID: "order-7", StepID: 3},
		"another workflow": {App: "shop", WorkflowID: "order-8", StepID: 2},
		"another app":      {App: "bar", WorkflowID: "order-7", StepID: 2},
		"a slash moved":    {App: "shop/order-7", WorkflowID: "", StepID: 2},
	} {
		assert.NotEqual(t, key, o.Key(), name)
	}
	long := idemdbos.Step{WorkflowID: strings.Repeat("w", 2000), StepID: 1}
	assert.Equal(t, "dbos:sha1:"+long.Key(), long.Intent())
}

func TestStepError(t *testing.T) {
	step := idemdbos.Step{App: "shop", WorkflowID: "wf", StepID: 1}
	op := func(kind error, unknown bool) error {
		return &idem.OperationError{Key: step.Key(), Scope: "t", LastStatusCode: 502, Kind: kind, Unknown: unknown}
	}
	cases := []struct {
		name string
		err  error
		kind idemdbos.Kind
		is   error
	}{
		{"unknown", op(idem.ErrOutcomeUnknown, true), idemdbos.KindRetry, idem.ErrOutcomeUnknown},
		{"exhausted", op(idem.ErrExhausted, true), idemdbos.KindRetry, idem.ErrOutcomeUnknown},
		{"canceled", op(idem.ErrCanceled, true), idemdbos.KindRetry, idem.ErrOutcomeUnknown},
		{"store down before the send", errors.New("store closed"), idemdbos.KindRetry, idem.ErrOutcomeUnknown},
		{"permanent", op(idem.ErrPermanent, false), idemdbos.KindPermanent, idem.ErrPermanent},
		{"permanent but unrecorded", op(idem.ErrPermanent, true), idemdbos.KindRetry, idem.ErrOutcomeUnknown},
		{"key reuse", op(idem.ErrKeyConflict, false), idemdbos.KindKeyConflict, idem.ErrKeyConflict},
		{"not executed", op(idem.ErrNotExecuted, false), idemdbos.KindNotExecuted, idem.ErrNotExecuted},
		{"stored 5xx", op(idem.ErrStoredServerError, true), idemdbos.KindManual, idem.ErrOutcomeUnknown},
		{"key expired", op(idem.ErrKeyExpired, true), idemdbos.KindManual, idem.ErrOutcomeUnknown},
		{"invalid", fmt.Errorf("%w: x", idem.ErrInvalidOperation), idemdbos.KindInvalid, idem.ErrInvalidOperation},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := idemdbos.StepError(step, tc.err)
			var e *idemdbos.Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, tc.kind, e.Kind)
			assert.Equal(t, step, e.Step)
			assert.Equal(t, step.Key(), e.Key)
			assert.ErrorIs(t, err, tc.err, "idem's error stays reachable")
			assert.Equal(t, tc.kind == idemdbos.KindRetry, idemdbos.Retryable(err))

			// What DBOS checkpoints: the error gob-encoded as an error interface value.
			var buf bytes.Buffer
			var in error = err
			require.NoError(t, gob.NewEncoder(&buf).Encode(&in))
			var out error
			require.NoError(t, gob.NewDecoder(&buf).Decode(&out))
			var back *idemdbos.Error
			require.ErrorAs(t, out, &back)
			assert.Equal(t, e.Kind, back.Kind)
			assert.Equal(t, e.Step, back.Step)
			assert.Equal(t, e.Status, back.Status)
			assert.Equal(t, err.Error(), out.Error())
			assert.ErrorIs(t, out, tc.is, "the sentinel matches after a checkpoint")
		})
	}
	assert.NoError(t, idemdbos.StepError(step, nil))
	assert.False(t, idemdbos.Retryable(errors.New("other")))
}

func TestDoOutsideAStep(t *testing.T) {
	_, err := idemdbos.New(idemdbos.Config{})
	assert.ErrorIs(t, err, idemdbos.ErrNoClient)
	c, err := idem.NewClient(idem.Config{BaseURL: "http://127.0.0.1:1"})
	require.NoError(t, err)
	defer c.Close()
	p, err := idemdbos.New(idemdbos.Config{Client: c})
	require.NoError(t, err)
	_, err = p.Do(context.Background(), "POST", "/v1/payments", nil, nil)
	var e *idemdbos.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, idemdbos.KindInvalid, e.Kind)
	assert.ErrorIs(t, err, idem.ErrInvalidOperation)
}
