package idem

import (
	"context"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemtest"
)

// A caller's httptrace in the context sees each attempt once: WithClientTrace composes the
// caller's hooks into the trace it is given, and a trace shared by the attempts collected
// them again at every attempt (the third attempt ran the caller's hooks three times).
func TestCallerTraceHooksOncePerAttempt(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, nil)
	e.srv.Script(idemtest.Fault503, idemtest.Fault503)
	var gotConn, wrote atomic.Int64
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn:      func(httptrace.GotConnInfo) { gotConn.Add(1) },
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Add(1) },
	})
	res, err := e.c.Do(ctx, payment(1250, "order-trace"))
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, res.StatusCode)
	assert.Equal(t, 3, res.Attempts)
	assert.Equal(t, int64(3), gotConn.Load(), "GotConn calls")
	assert.Equal(t, int64(3), wrote.Load(), "WroteRequest calls")
}
