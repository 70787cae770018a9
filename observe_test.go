package idem

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/event"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/outcome"
)

// Logs name keys, attempts and classes; never bodies or credentials.
func TestLoggerNeverLogsBodiesOrCredentials(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&buf, &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEnv(t, idemtest.Config{}, func(c *Config) { c.Logger = logger })
	e.srv.Script(idemtest.FaultDropAfterCommit, idemtest.Fault503)
	secret := "Bearer sk_live_SECRET"
	op := payment(31337, "ref-logged", WithHeader(http.Header{"Authorization": {secret}}))
	_, err := e.c.Do(context.Background(), op)
	require.NoError(t, err)
	_, err = e.c.Do(context.Background(), payment(0, "invalid-ref", WithHeader(http.Header{"Authorization": {secret}})))
	require.ErrorIs(t, err, ErrPermanent)

	mu.Lock()
	out := buf.String()
	mu.Unlock()
	assert.Contains(t, out, op.Key(), "logs name the key")
	assert.Contains(t, out, "idem status check")
	for _, leak := range []string{"sk_live_SECRET", "31337", "ref-logged", "invalid-ref", "cus_1"} {
		assert.NotContains(t, out, leak)
	}
}

type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// Every hook fires with the key, in order, for a call that meets a 409, an unknown outcome
// resolved by the status endpoint, and a give-up.
func TestHooksReportEvents(t *testing.T) {
	var mu sync.Mutex
	var got []string
	add := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, s)
	}
	e := newEnv(t, idemtest.Config{}, func(c *Config) {
		c.Hooks = event.Hooks{
			OnAttempt:        func(ev event.Attempt) { add("attempt:" + ev.Class.String()) },
			OnRetry:          func(ev event.Retry) { add("retry:" + ev.Reason.String()) },
			OnKeyStatusCheck: func(ev event.KeyStatusCheck) { add("status:" + ev.State.String()) },
			OnUnknown:        func(event.Unknown) { add("unknown") },
			OnReplay:         func(event.Replay) { add("replay") },
			OnGiveUp:         func(ev event.GiveUp) { add("giveup:" + ev.Err.(*OperationError).Kind.Error()) },
		}
	})
	e.srv.Script(idemtest.Fault502BeforeProcessing)
	_, err := e.c.Do(context.Background(), payment(1, "h"))
	require.NoError(t, err)
	assert.Equal(t, []string{"attempt:unknown", "unknown", "status:not_found", "retry:unknown", "attempt:success"}, got)

	got = nil
	_, err = e.c.Do(context.Background(), payment(0, "h2"))
	require.Error(t, err)
	assert.Equal(t, []string{"attempt:permanent", "giveup:" + ErrPermanent.Error()}, got)
}

// APIs with another status convention plug in a KeyStatusFunc, per client or per call.
func TestCustomStatusFunc(t *testing.T) {
	var asked []string
	e := newEnv(t, idemtest.Config{}, nil)
	e.srv.Script(idemtest.FaultDropAfterCommit)
	op := payment(1, "custom")
	res, err := e.c.Do(context.Background(), op, CallKeyStatusFunc(func(ctx context.Context, r outcome.KeyStatusRequest) (outcome.KeyStatus, error) {
		asked = append(asked, r.Key+" "+r.Method+" "+r.URL)
		return outcome.KeyStatus{State: outcome.KeyStatusCompleted, ResponseStatusCode: 201, ResponseBody: []byte(`{"id":"from-status"}`)}, nil
	}))
	require.NoError(t, err)
	assert.Equal(t, []string{op.Key() + " POST /v1/payments"}, asked)
	assert.Equal(t, `{"id":"from-status"}`, string(res.Body))
	assert.Equal(t, 0, e.srv.KeyStatusChecks(), "the default endpoint was not asked")
}
