package idemtemporal_test

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtemporal"
	"github.com/idemkit/idem/idemtest"
)

// While idem waits out a Retry-After, Do keeps heartbeating with the call's key.
func TestHeartbeatsWhileIdemWaits(t *testing.T) {
	api := idemtest.NewServer(idemtest.Config{RetryAfter: 1})
	defer api.Close()
	api.Script(idemtest.Fault503) // "Retry-After: 1": idem sleeps a second, then resends

	c, err := idem.NewClient(idem.Config{BaseURL: api.URL, KeyStatusURL: statusPath})
	require.NoError(t, err)
	defer c.Close()
	p, err := idemtemporal.New(idemtemporal.Config{Client: c, HeartbeatInterval: 20 * time.Millisecond})
	require.NoError(t, err)

	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestActivityEnvironment()
	// The SDK sends at most one heartbeat per throttle interval to the server; the
	// interceptor sees every call Do makes.
	hb := &heartbeats{}
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{hb}})
	var step idemtemporal.Step
	pay := func(ctx context.Context) (int, error) {
		step = p.Step(ctx)
		res, err := p.Do(ctx, http.MethodPost, paymentsPath,
			[]byte(`{"amount":100,"currency":"EUR","customer":"cus_1","reference":"order-hb"}`), nil)
		if err != nil {
			return 0, err
		}
		return res.Attempts, nil
	}
	env.RegisterActivity(pay)
	start := time.Now()
	val, err := env.ExecuteActivity(pay)
	require.NoError(t, err)
	var attempts int
	require.NoError(t, val.Get(&attempts))
	assert.Equal(t, 2, attempts, "the 503, then the payment")
	assert.GreaterOrEqual(t, time.Since(start), time.Second, "idem honoured Retry-After")
	hb.mu.Lock()
	defer hb.mu.Unlock()
	beats := hb.beats
	// One at the start and about one per 20 ms through the one-second wait; at least ten
	// leaves room for a slow machine under -race.
	assert.GreaterOrEqual(t, len(beats), 10)
	for _, d := range beats {
		assert.Equal(t, idemtemporal.Details{Key: step.Key(), Intent: step.Intent()}, d)
	}
	assert.Equal(t, 1, api.ExecutionsByReference("order-hb"))
}

// heartbeats records the details of every RecordHeartbeat an activity makes.
type heartbeats struct {
	interceptor.WorkerInterceptorBase
	mu    sync.Mutex
	beats []idemtemporal.Details
}

func (h *heartbeats) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &heartbeatsIn{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, root: h}
}

type heartbeatsIn struct {
	interceptor.ActivityInboundInterceptorBase
	root *heartbeats
}

func (i *heartbeatsIn) Init(out interceptor.ActivityOutboundInterceptor) error {
	return i.Next.Init(&heartbeatsOut{ActivityOutboundInterceptorBase: interceptor.ActivityOutboundInterceptorBase{Next: out}, root: i.root})
}

type heartbeatsOut struct {
	interceptor.ActivityOutboundInterceptorBase
	root *heartbeats
}

func (o *heartbeatsOut) RecordHeartbeat(ctx context.Context, details ...any) {
	o.root.mu.Lock()
	for _, d := range details {
		if d, ok := d.(idemtemporal.Details); ok {
			o.root.beats = append(o.root.beats, d)
		}
	}
	o.root.mu.Unlock()
	o.Next.RecordHeartbeat(ctx, details...)
}
