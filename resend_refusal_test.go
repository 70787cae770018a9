package idem

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

// chargeThenRefuse charges a key's first request and resets the connection instead of
// answering; a resend with that key gets refusal, unless replay is set, when the stored 201
// is replayed (as a server whose auth layer was fixed would).
type chargeThenRefuse struct {
	mu       sync.Mutex
	charged  map[string]int // key -> charges
	refusal  int
	body     string // the refusal's body; `{"error":"refused"}` if empty
	replayed bool   // the refusal carries Idempotent-Replayed: true
	replay   bool
	keys     []string
}

func (h *chargeThenRefuse) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	h.mu.Lock()
	h.keys = append(h.keys, key)
	n := h.charged[key]
	if n == 0 {
		h.charged[key] = 1
	}
	refusal, replayed, replay := h.refusal, h.replayed, h.replay
	h.mu.Unlock()
	switch {
	case n == 0: // charged; the answer is lost
		conn, _, _ := w.(http.Hijacker).Hijack()
		_ = conn.Close()
	case replay:
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"pay_1"}`))
	default:
		if replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		body := h.body
		if body == "" {
			body = `{"error":"refused"}`
		}
		w.WriteHeader(refusal)
		_, _ = w.Write([]byte(body))
	}
}

// A resend after an unknown outcome that meets a refusal which is not the key's stored
// answer (an auth layer's 401, a WAF's 403, a 422 judged on something that changed) ends
// unknown, the record pending: the earlier attempt may have charged. A later call with the
// same operation, once the server replays the key, gets the payment; it is charged once.
func TestRefusalOfAResendIsNotAFailure(t *testing.T) {
	for _, tc := range []struct {
		code int
		body string
	}{
		{http.StatusUnauthorized, ""}, {http.StatusForbidden, ""}, {http.StatusNotFound, ""},
		{http.StatusBadRequest, ""}, {http.StatusUnprocessableEntity, ""},
		{http.StatusUnprocessableEntity, `{"error":"idempotency_key_reused"}`}, // a key conflict on a first attempt
	} {
		code := tc.code
		t.Run(http.StatusText(code)+tc.body, func(t *testing.T) {
			h := &chargeThenRefuse{charged: map[string]int{}, refusal: code, body: tc.body}
			c, _, store := scriptedClient(t, h, nil)
			op := payment(1, "refused")
			_, err := c.Do(context.Background(), op)
			require.ErrorIs(t, err, ErrOutcomeUnknown)
			require.NotErrorIs(t, err, ErrPermanent)
			require.NotErrorIs(t, err, ErrKeyConflict)
			oe, ok := errors.AsType[*OperationError](err)
			require.True(t, ok)
			require.True(t, oe.Unknown)
			require.Equal(t, code, oe.LastStatusCode)
			rec, err := store.Get(context.Background(), "", op.Key())
			require.NoError(t, err)
			require.Equal(t, keystore.StatePending, rec.State)
			require.False(t, rec.NotExecuted)
			require.Equal(t, 2, rec.Attempts)

			h.mu.Lock()
			h.replay = true
			h.mu.Unlock()
			res, err := c.Do(context.Background(), op)
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, res.StatusCode)
			require.Equal(t, outcome.SourceReplay, res.Source)
			require.Equal(t, 1, h.charged[op.Key()])
			require.Equal(t, []string{op.Key(), op.Key(), op.Key()}, h.keys)
		})
	}
}

// A refusal the server marks as the key's stored answer speaks for the first attempt too:
// that is a failure, as on a first attempt.
func TestReplayedRefusalOfAResendFails(t *testing.T) {
	h := &chargeThenRefuse{charged: map[string]int{}, refusal: http.StatusBadRequest, replayed: true}
	c, _, store := scriptedClient(t, h, nil)
	op := payment(1, "replayed-400")
	_, err := c.Do(context.Background(), op)
	require.ErrorIs(t, err, ErrPermanent)
	require.NotErrorIs(t, err, ErrOutcomeUnknown)
	rec, err := store.Get(context.Background(), "", op.Key())
	require.NoError(t, err)
	require.Equal(t, keystore.StateFailed, rec.State)
}

// Over the Transport, the same refusal is an error matching ErrOutcomeUnknown, not a 401
// response a generated client would read as a failed payment.
func TestTransportRefusalOfAResendIsAnError(t *testing.T) {
	h := &chargeThenRefuse{charged: map[string]int{}, refusal: http.StatusUnauthorized}
	c, _, _ := scriptedClient(t, h, nil)
	hc := NewHTTPClient(c)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, c.cfg.BaseURL+"/v1/payments",
		bytes.NewReader(paymentBody(1, "transport-401")))
	require.NoError(t, err)
	resp, err := hc.Do(req)
	if resp != nil {
		_ = resp.Body.Close()
	}
	require.ErrorIs(t, err, ErrOutcomeUnknown)
}

// A classifier of the caller's may call an answerless attempt (a transport error) permanent;
// after an unknown outcome that proves nothing either, and it must not crash the call.
func TestPermanentWithoutAnswerAfterUnknownIsUnknown(t *testing.T) {
	var posts atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if posts.Add(1) == 1 {
			w.WriteHeader(http.StatusInternalServerError) // not stored: outcome unknown
			return
		}
		conn, _, _ := w.(http.Hijacker).Hijack()
		_ = conn.Close()
	})
	transportErrorsArePermanent := outcome.ClassifierFunc(func(a *outcome.Attempt) outcome.Class {
		if a.Response == nil {
			return outcome.ClassPermanent
		}
		return outcome.ClassUndecided
	})
	c, _, store := scriptedClient(t, h, func(cfg *Config) {
		cfg.Classifiers = append(outcome.Classifiers{transportErrorsArePermanent}, outcome.DefaultClassifiers()...)
	})
	op := payment(1, "answerless")
	_, err := c.Do(context.Background(), op)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.NotErrorIs(t, err, ErrPermanent)
	require.Contains(t, err.Error(), "a transport error")
	require.Equal(t, int32(2), posts.Load())
	rec, err := store.Get(context.Background(), "", op.Key())
	require.NoError(t, err)
	require.Equal(t, keystore.StatePending, rec.State)
}

// notFinalThenReplay charges a key's first request and resets the connection; the next
// resend gets code marked as the key's replay (Idempotent-Replayed: true, Retry-After: 0),
// every later one the stored 201.
type notFinalThenReplay struct {
	code  int
	posts atomic.Int32
	keys  sync.Map // key -> charges (int)
}

func (h *notFinalThenReplay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if _, loaded := h.keys.LoadOrStore(key, 1); !loaded {
		h.posts.Add(1)
		conn, _, _ := w.(http.Hijacker).Hijack()
		_ = conn.Close()
		return
	}
	w.Header().Set("Idempotent-Replayed", "true")
	if h.posts.Add(1) == 2 {
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(h.code)
		_, _ = w.Write([]byte(`{"error":"in progress"}`))
		return
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(`{"id":"pay_1"}`))
}

// A 408, 409, 425 or 429 marked as the key's replay, to a resend after an unknown outcome,
// speaks of the request in flight, not of the operation's end: the call waits or retries as
// for the unmarked status, and ends with the payment, charged once. It ended ErrPermanent,
// the record failed, while the first request was charging.
func TestReplayedNotFinalStatusIsNotAFailure(t *testing.T) {
	for _, code := range []int{http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			h := &notFinalThenReplay{code: code}
			c, _, store := scriptedClient(t, h, nil)
			op := payment(1, "in-flight")
			res, err := c.Do(context.Background(), op)
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, res.StatusCode)
			require.Equal(t, 3, res.Attempts)
			require.Equal(t, int32(3), h.posts.Load())
			rec, err := store.Get(context.Background(), "", op.Key())
			require.NoError(t, err)
			require.Equal(t, keystore.StateSucceeded, rec.State)
		})
	}
}
