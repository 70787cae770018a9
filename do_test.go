package idem

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/event"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

func TestDoHappyPath(t *testing.T) {
	var seenKey, seenLength []string
	e := newEnv(t, idemtest.Config{OnPayment: func(r *http.Request) {
		seenKey = append(seenKey, r.Header.Get("Idempotency-Key"))
		seenLength = append(seenLength, r.Header.Get("Content-Length"))
	}}, nil)
	op := payment(1250, "order-1")
	res, err := e.c.Do(context.Background(), op)
	require.NoError(t, err)

	assert.Equal(t, http.StatusCreated, res.StatusCode)
	assert.Equal(t, op.Key(), res.Key)
	assert.Equal(t, 1, res.Attempts)
	assert.Equal(t, outcome.SourceResponse, res.Source)
	assert.False(t, res.Replayed())
	assert.Contains(t, string(res.Body), `"amount":1250`)
	assert.Equal(t, []string{op.Key()}, seenKey)
	assert.Equal(t, []string{strconv.Itoa(len(op.Body()))}, seenLength)
	assert.Equal(t, 1, e.srv.ExecutionsFor(op.Key()))

	rec := e.record(op.Key())
	assert.Equal(t, keystore.StateSucceeded, rec.State)
	assert.Equal(t, 1, rec.Attempts)
	assert.Equal(t, res.Body, rec.Response.Body)
	assert.Equal(t, Fingerprint("POST", "/v1/payments", op.Body()), rec.Fingerprint)
	assert.Empty(t, e.clock.Sleeps())
}

// The record must be durable before the first byte leaves: the server looks into the store
// at the moment the request arrives.
func TestDoPersistsBeforeFirstSend(t *testing.T) {
	var e *env
	var atArrival []*keystore.Record
	e = newEnv(t, idemtest.Config{OnPayment: func(r *http.Request) {
		rec, err := e.store.Get(context.Background(), "", r.Header.Get("Idempotency-Key"))
		if err == nil {
			atArrival = append(atArrival, rec)
		}
	}}, nil)
	op := payment(500, "order-2", WithIntent("order-2"))
	_, err := e.c.Do(context.Background(), op)
	require.NoError(t, err)
	require.Len(t, atArrival, 1, "record must exist when the request arrives")
	assert.Equal(t, keystore.StatePending, atArrival[0].State)
	assert.Equal(t, "order-2", atArrival[0].Intent)
	assert.Equal(t, op.Body(), atArrival[0].Request.Body)
}

// Every attempt carries the same key and byte-identical body; Retry-After seconds is waited
// exactly.
func TestDoRetriesThrottledWithSameKeyAndBody(t *testing.T) {
	type seen struct {
		key  string
		body string
		cl   int64
	}
	var got []seen
	e := newEnv(t, idemtest.Config{RetryAfter: 2, OnPayment: func(r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, seen{r.Header.Get("Idempotency-Key"), string(b), r.ContentLength})
		r.Body = nopBody(b)
	}}, nil)
	e.srv.Script(idemtest.Fault503, idemtest.Fault429, idemtest.Fault503Date)
	op := payment(700, "order-3")
	res, err := e.c.Do(context.Background(), op)
	require.NoError(t, err)
	assert.Equal(t, 4, res.Attempts)
	require.Len(t, got, 4)
	for i, s := range got {
		assert.Equal(t, op.Key(), s.key, "attempt %d key", i+1)
		assert.Equal(t, string(op.Body()), s.body, "attempt %d body", i+1)
		assert.Equal(t, int64(len(op.Body())), s.cl, "attempt %d Content-Length", i+1)
	}
	// 503 and 429 carry "Retry-After: 2"; the date form is now+2s on the shared clock.
	assert.Equal(t, []time.Duration{2 * time.Second, 2 * time.Second, 2 * time.Second}, e.clock.Sleeps())
	assert.Equal(t, 1, e.srv.ExecutionsFor(op.Key()))
	assert.Equal(t, int64(3), e.c.Stats().ThrottledWaits)
}

func TestDoValidationErrorIsNotRetried(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, nil)
	op := payment(0, "bad") // amount 0 is invalid
	res, err := e.c.Do(context.Background(), op)
	require.Nil(t, res)
	require.ErrorIs(t, err, ErrPermanent)
	oe := opErr(t, err)
	assert.Equal(t, 1, oe.Attempts)
	assert.Equal(t, http.StatusBadRequest, oe.LastStatusCode)
	assert.False(t, oe.Unknown)
	require.NotNil(t, oe.Response)
	assert.Equal(t, http.StatusBadRequest, oe.Response.StatusCode)
	assert.Contains(t, string(oe.Response.Body), "amount")
	assert.Equal(t, 1, e.srv.AttemptsFor(op.Key()))
	assert.Equal(t, keystore.StateFailed, e.record(op.Key()).State)

	// The stored failure is returned again without a send.
	_, err = e.c.Do(context.Background(), op)
	require.ErrorIs(t, err, ErrPermanent)
	assert.True(t, opErr(t, err).Stored)
	assert.Equal(t, http.StatusBadRequest, opErr(t, err).Response.StatusCode)
	assert.Equal(t, 1, e.srv.AttemptsFor(op.Key()))
}

func TestDoKeyConflict(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, nil)
	first := payment(100, "a")
	_, err := e.c.Do(context.Background(), first)
	require.NoError(t, err)

	// Locally: same key, other body, refused before sending.
	again := payment(200, "a", WithKey(first.Key()))
	_, err = e.c.Do(context.Background(), again)
	require.ErrorIs(t, err, ErrKeyConflict)
	assert.Contains(t, err.Error(), first.Key())
	assert.Equal(t, 1, e.srv.AttemptsFor(first.Key()))

	// Server side: another client (its own keystore) reuses the key: 422, named as a conflict.
	other, err := NewClient(Config{BaseURL: e.srv.URL, Store: keystore.NewMemory(), Now: e.clock.Now, Sleep: e.clock.Sleep})
	require.NoError(t, err)
	_, err = other.Do(context.Background(), payment(300, "a", WithKey(first.Key())))
	require.ErrorIs(t, err, ErrKeyConflict)
	oe := opErr(t, err)
	assert.Equal(t, http.StatusUnprocessableEntity, oe.LastStatusCode)
	assert.Equal(t, 1, oe.Attempts)
	assert.Equal(t, 1, e.srv.ExecutionsFor(first.Key()))
}

func TestDoInvalidInputNeverPanics(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, nil)
	ctx := context.Background()
	for name, tc := range map[string]struct {
		op   *Operation
		opts []CallOption
		want error
	}{
		"nil op":           {nil, nil, ErrInvalidOperation},
		"empty key":        {payment(1, "x", WithKey(" ")), nil, ErrInvalidOperation},
		"zero attempts":    {payment(1, "x"), []CallOption{CallMaxAttempts(0)}, ErrInvalidPolicy},
		"negative timeout": {payment(1, "x"), []CallOption{CallAttemptTimeout(-time.Second)}, ErrInvalidPolicy},
		"timeout >= lease": {payment(1, "x"), []CallOption{CallAttemptTimeout(defaultLeaseTTL)}, ErrInvalidPolicy},
		"bad jitter":       {payment(1, "x"), []CallOption{CallBackoff(time.Millisecond, 2, 1.5, time.Second)}, ErrInvalidPolicy},
		"multiplier < 1":   {payment(1, "x"), []CallOption{CallBackoff(time.Millisecond, 0.5, 0.1, time.Second)}, ErrInvalidPolicy},
		"empty method":     {NewOperation("", "/v1/payments", nil), nil, ErrInvalidOperation},
		"status no {key}":  {payment(1, "x"), []CallOption{CallKeyStatusURL("/status")}, ErrInvalidConfig},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := e.c.Do(ctx, tc.op, tc.opts...)
			require.ErrorIs(t, err, tc.want)
		})
	}
	assert.Equal(t, 0, e.srv.Stats().Requests)

	for name, cfg := range map[string]Config{
		"relative base":   {BaseURL: "/api"},
		"bad multiplier":  {Policy: Policy{Multiplier: 0.3}},
		"bad jitter":      {Policy: Policy{Jitter: 3}},
		"negative budget": {Budget: BudgetConfig{Capacity: -1}},
		"bad key header":  {KeyHeader: "Idempotency Key"},
		"negative ttl":    {KeyTTL: -time.Hour},
	} {
		t.Run("config "+name, func(t *testing.T) {
			_, err := NewClient(cfg)
			require.Error(t, err)
		})
	}
}

// The IETF draft sends the key as an RFC 8941 sf-string; attempts and status checks agree.
func TestDoKeyAsSFString(t *testing.T) {
	var seen []string
	e := newEnv(t, idemtest.Config{OnPayment: func(r *http.Request) { seen = append(seen, r.Header.Get("Idempotency-Key")) }},
		func(c *Config) { c.KeyAsSFString = true })
	e.srv.Script(idemtest.FaultDropAfterCommit)
	op := payment(10, "sf")
	res, err := e.c.Do(context.Background(), op)
	require.NoError(t, err)
	assert.Equal(t, []string{`"` + op.Key() + `"`}, seen)
	assert.Equal(t, outcome.SourceKeyStatus, res.Source, "the status check found the key the server unquoted")
	assert.Equal(t, 1, e.srv.ExecutionsFor(op.Key()))
}

func TestLocalKeyConflictIsCountedAndHooked(t *testing.T) {
	var events []event.KeyConflict
	e := newEnv(t, idemtest.Config{}, func(c *Config) {
		c.Hooks.OnKeyConflict = func(ev event.KeyConflict) { events = append(events, ev) }
	})
	op := payment(1, "k", WithIntent("order-k"))
	_, err := e.c.Do(context.Background(), op)
	require.NoError(t, err)
	_, err = e.c.Do(context.Background(), NewOperation(http.MethodPut, "/v1/payments", op.Body(), WithKey(op.Key())))
	require.ErrorIs(t, err, ErrKeyConflict)
	assert.Contains(t, err.Error(), "another request")
	assert.Equal(t, int64(1), e.c.Stats().KeyConflicts)
	require.Len(t, events, 1)
	assert.Equal(t, op.Key(), events[0].Key)
	assert.Equal(t, 0, events[0].StatusCode, "refused locally")
	assert.Equal(t, 1, e.srv.Stats().Requests)
}

func TestKeyBoundToAnotherIntentIsAConflict(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, nil)
	op := payment(1, "a", WithIntent("order-a"))
	_, err := e.c.Do(context.Background(), op)
	require.NoError(t, err)
	_, err = e.c.Do(context.Background(), payment(1, "a", WithKey(op.Key()), WithIntent("order-b")))
	require.ErrorIs(t, err, ErrKeyConflict)
	assert.Contains(t, err.Error(), `belongs to intent "order-a"`)
	// The same key without naming an intent is the same operation: answered from the store.
	res, err := e.c.Do(context.Background(), payment(1, "a", WithKey(op.Key())))
	require.NoError(t, err)
	assert.Equal(t, outcome.SourceStore, res.Source)
	assert.Equal(t, 1, e.srv.Stats().Requests)
}
