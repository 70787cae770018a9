package idem

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/event"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

const searchPath = "/v1/payments?reference={reference}"

func withReferenceLookup(t *testing.T) func(*Config) {
	lk, err := LookupByReference(searchPath, "")
	require.NoError(t, err)
	return func(c *Config) { c.Lookup = lk }
}

// A stored 500 goes through the business lookup: a charge found settles the record as
// succeeded with that charge; none settles it as not executed, and only then does a new
// intent pay. The ledger per reference is the oracle.
func TestLookupSettlesStoredServerError(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fault    idemtest.Fault
		executed bool
	}{
		{"charged then stored 500: found", idemtest.FaultStored500AfterCharge, true},
		{"stored 500 without charge: not executed", idemtest.FaultStored500, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stored, resolved []string
			e := newEnv(t, idemtest.Config{}, func(c *Config) {
				withReferenceLookup(t)(c)
				c.Hooks.OnStoredServerError = func(ev event.StoredServerError) {
					stored = append(stored, ev.Key+" "+string(ev.Source))
				}
				c.Hooks.OnResolved = func(ev event.Resolved) {
					require.True(t, ev.ByLookup)
					require.Equal(t, tc.executed, ev.Executed)
					resolved = append(resolved, ev.Key)
				}
			})
			e.srv.Script(tc.fault)
			ctx := context.Background()
			op := payment(700, "order-1", WithIntent("order-1"))
			res, err := e.c.Do(ctx, op)
			assert.Equal(t, 1, e.srv.AttemptsFor(op.Key()), "the stored 500's key is never resent")
			assert.Equal(t, []string{op.Key() + " status"}, stored, "the status endpoint reported the stored 500")
			assert.Equal(t, []string{op.Key()}, resolved)
			rec := e.record(op.Key())
			assert.Equal(t, http.StatusInternalServerError, rec.LastStatusCode)
			assert.True(t, strings.HasPrefix(rec.Note, "lookup: "), rec.Note)
			st := e.c.Stats()
			assert.Equal(t, int64(1), st.StoredServerErrors)
			assert.Equal(t, int64(1), st.Lookups)
			assert.Equal(t, int64(1), st.ResolvedByLookup)
			// Stats say what Do returned: a Result is a success, not a give-up.
			if tc.executed {
				assert.Equal(t, Stats{Succeeded: 1, FinalFailures: 0}, Stats{Succeeded: st.Succeeded, FinalFailures: st.FinalFailures})
			} else {
				assert.Equal(t, Stats{Succeeded: 0, FinalFailures: 1}, Stats{Succeeded: st.Succeeded, FinalFailures: st.FinalFailures})
			}

			if tc.executed {
				require.NoError(t, err)
				assert.Equal(t, outcome.SourceLookup, res.Source)
				assert.Equal(t, 1, res.Attempts, "the stored 500's one attempt, as its error would say")
				assert.Equal(t, "pay_1", jsonID(t, res.Body))
				assert.Equal(t, keystore.StateSucceeded, rec.State)
				assert.Equal(t, keystore.ReasonExecuted, rec.Reason)
				assert.Equal(t, res.Body, rec.Response.Body)
				// Do of the same intent answers from the record, nothing sent.
				again, err := e.c.Do(ctx, payment(700, "order-1", WithIntent("order-1")))
				require.NoError(t, err)
				assert.Equal(t, outcome.SourceStore, again.Source)
				assert.Equal(t, res.Body, again.Body)
				assert.Equal(t, 1, e.srv.Attempts())
				assert.Equal(t, 1, e.srv.ExecutionsByReference("order-1"))
				return
			}
			require.ErrorIs(t, err, ErrNotExecuted)
			assert.NotErrorIs(t, err, ErrOutcomeUnknown, "the lookup answered")
			assert.Equal(t, keystore.StateFailed, rec.State)
			assert.Equal(t, keystore.ReasonNotExecuted, rec.Reason)
			assert.Equal(t, http.StatusInternalServerError, rec.Response.StatusCode, "the stored answer is kept")
			_, err = e.c.Do(ctx, payment(700, "order-1", WithIntent("order-1")))
			require.ErrorIs(t, err, ErrNotExecuted)
			assert.True(t, opErr(t, err).Stored)
			// Only now does the application pay again, under a new intent (a new key).
			res, err = e.c.Do(ctx, payment(700, "order-1", WithIntent("order-1#2")))
			require.NoError(t, err)
			assert.Equal(t, outcome.SourceResponse, res.Source)
			assert.NotEqual(t, op.Key(), res.Key)
			assert.Equal(t, 1, e.srv.ExecutionsByReference("order-1"), "charged exactly once per reference")
		})
	}
}

// A lookup that cannot tell leaves the record manual; Recover asks again later and settles it.
func TestLookupInconclusiveThenRecover(t *testing.T) {
	var verdict atomic.Int64 // a Verdict
	var asked atomic.Int64
	e := newEnv(t, idemtest.Config{}, func(c *Config) {
		c.Lookup = func(ctx context.Context, req LookupRequest) (Resolution, error) {
			asked.Add(1)
			return Resolution{Verdict: Verdict(verdict.Load()), Note: "ticket 42",
				Response: &keystore.Response{StatusCode: 200, Body: []byte(`{"id":"pay_1"}`)}}, nil
		}
	})
	e.srv.Script(idemtest.FaultStored500AfterCharge)
	ctx := context.Background()
	op := payment(5, "order-9")
	_, err := e.c.Do(ctx, op)
	require.ErrorIs(t, err, ErrStoredServerError)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	assert.Equal(t, keystore.StateManual, e.record(op.Key()).State)
	assert.Equal(t, int64(1), asked.Load())

	verdict.Store(int64(VerdictExecuted))
	var got []Reconciled
	rep, err := e.c.Recover(ctx, func(r Reconciled) { got = append(got, r) })
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Resolved)
	assert.Equal(t, 0, rep.Pending)
	require.Len(t, got, 1)
	require.NoError(t, got[0].Err)
	assert.Equal(t, outcome.SourceLookup, got[0].Result.Source)
	rec := e.record(op.Key())
	assert.Equal(t, keystore.StateSucceeded, rec.State)
	assert.Equal(t, "ticket 42", rec.Note)
	assert.Equal(t, `{"id":"pay_1"}`, string(rec.Response.Body))
	assert.Equal(t, 1, e.srv.AttemptsFor(op.Key()), "Recover never resends a stored 5xx")
	assert.Equal(t, int64(2), asked.Load())

	// Settled records are not asked about again.
	rep, err = e.c.Recover(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, 0, rep.Resolved)
	assert.Equal(t, int64(2), asked.Load())
}

// A key past KeyTTL with an unknown outcome is manual; the lookup settles it too.
func TestLookupSettlesExpiredKey(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, func(c *Config) {
		c.KeyStatusURL = ""
		withReferenceLookup(t)(c)
	})
	e.srv.Script(idemtest.Fault502BeforeProcessing)
	ctx := context.Background()
	op := payment(5, "order-exp", WithIntent("order-exp"))
	_, err := e.c.Do(ctx, op, CallMaxAttempts(1))
	require.ErrorIs(t, err, ErrExhausted)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	e.clock.Advance(DefaultKeyTTL + time.Minute)
	// The search finds nothing, but the key is past the server's retention: a request still on
	// its way would execute after it. The record stays manual until ExpiredKeySettleDelay
	// after the last time a request of the key can have been sent: the lease of the call
	// that made it manual (which sent nothing, but could have).
	_, err = e.c.Do(ctx, payment(5, "order-exp", WithIntent("order-exp")))
	require.ErrorIs(t, err, ErrKeyExpired)
	manual := e.record(op.Key())
	assert.Equal(t, keystore.StateManual, manual.State)
	require.True(t, manual.LeaseUntil.After(manual.UpdatedAt))
	e.clock.Advance(manual.LeaseUntil.Add(expiredKeySettleDelay - time.Second).Sub(e.clock.Now()))
	_, err = e.c.Do(ctx, payment(5, "order-exp", WithIntent("order-exp")))
	require.ErrorIs(t, err, ErrKeyExpired)
	e.clock.Advance(time.Second)
	_, err = e.c.Do(ctx, payment(5, "order-exp", WithIntent("order-exp")))
	require.ErrorIs(t, err, ErrNotExecuted)
	assert.Equal(t, 1, e.srv.AttemptsFor(op.Key()), "an expired key is never resent")
	rec := e.record(op.Key())
	assert.Equal(t, keystore.StateFailed, rec.State)
	assert.Equal(t, keystore.ReasonNotExecuted, rec.Reason)
	assert.Equal(t, `lookup: no payment with reference "order-exp"`, rec.Note)
	assert.Equal(t, int64(1), e.c.Stats().KeyExpired)
}

// Client.Resolve: the application's or an operator's verdict, persisted; refused for a
// record that is not manual.
func TestResolve(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, nil)
	ctx := context.Background()
	e.srv.Script(idemtest.FaultStored500, idemtest.FaultStored500AfterCharge)
	lost := payment(1, "r-lost")
	paid := payment(2, "r-paid")
	_, err := e.c.Do(ctx, lost)
	require.ErrorIs(t, err, ErrStoredServerError)
	_, err = e.c.Do(ctx, paid)
	require.ErrorIs(t, err, ErrStoredServerError)

	// Bad verdicts and unknown keys are refused before anything is read or written.
	_, err = e.c.Resolve(ctx, "", lost.Key(), Resolution{})
	require.ErrorIs(t, err, ErrInvalidOperation)
	_, err = e.c.Resolve(ctx, "", lost.Key(), Resolution{Verdict: VerdictExecuted, Response: &keystore.Response{StatusCode: 42}})
	require.ErrorIs(t, err, ErrInvalidOperation)
	_, err = e.c.Resolve(ctx, "", "no-such-key", Resolution{Verdict: VerdictNotExecuted})
	require.ErrorIs(t, err, keystore.ErrNotFound)
	assert.Equal(t, keystore.StateManual, e.record(lost.Key()).State)

	rec, err := e.c.Resolve(ctx, "", lost.Key(), Resolution{Verdict: VerdictNotExecuted, Note: "ops: no charge in the dashboard"})
	require.NoError(t, err)
	assert.Equal(t, keystore.StateFailed, rec.State)
	stored := e.record(lost.Key())
	assert.Equal(t, rec, stored, "persisted before returning")
	assert.Equal(t, "ops: no charge in the dashboard", stored.Note)
	_, err = e.c.Do(ctx, lost)
	require.ErrorIs(t, err, ErrNotExecuted)
	assert.Equal(t, "resolved as not executed: ops: no charge in the dashboard", opErr(t, err).Cause.Error())

	rec, err = e.c.Resolve(ctx, "", paid.Key(), Resolution{Verdict: VerdictExecuted, Note: "ops: pay_1",
		Response: &keystore.Response{StatusCode: 201, Body: []byte(`{"id":"pay_1"}`)}})
	require.NoError(t, err)
	assert.Equal(t, keystore.ReasonExecuted, rec.Reason)
	res, err := e.c.Do(ctx, paid)
	require.NoError(t, err)
	assert.Equal(t, outcome.SourceStore, res.Source)
	assert.Equal(t, 201, res.StatusCode)
	assert.Equal(t, `{"id":"pay_1"}`, string(res.Body))
	assert.Equal(t, int64(2), e.c.Stats().ResolvedByCaller)

	// Not manual any more: refused, nothing written.
	_, err = e.c.Resolve(ctx, "", paid.Key(), Resolution{Verdict: VerdictNotExecuted})
	require.ErrorIs(t, err, ErrNotManual)
	assert.Equal(t, keystore.StateSucceeded, opErrState(t, e, paid.Key()))
	ok := payment(3, "r-ok")
	_, err = e.c.Do(ctx, ok)
	require.NoError(t, err)
	_, err = e.c.Resolve(ctx, "", ok.Key(), Resolution{Verdict: VerdictNotExecuted})
	oe := opErr(t, err)
	assert.ErrorIs(t, oe, ErrNotManual)
	assert.Equal(t, ok.Key(), oe.Key)
	assert.Equal(t, 3, e.srv.Attempts(), "Resolve never sends")
}

func opErrState(t *testing.T, e *env, key string) keystore.State {
	t.Helper()
	return e.record(key).State
}

// LookupByReference refuses a path without the placeholder and is inconclusive on an
// answer it cannot read.
func TestLookupByReferenceAnswers(t *testing.T) {
	_, err := LookupByReference("/v1/payments", "")
	require.ErrorIs(t, err, ErrInvalidConfig)
	lk, err := LookupByReference("/search?ref={reference}", "order")
	require.NoError(t, err)
	rec := &keystore.Record{Request: keystore.Request{Body: []byte(`{"order":"a b&c"}`)}}
	for _, tc := range []struct {
		name    string
		status  int
		body    string
		want    Verdict
		wantErr bool
	}{
		{"found", 200, `{"data":[{"id":"p1"},{"id":"p2"}]}`, VerdictExecuted, false},
		{"none", 200, `{"data":[]}`, VerdictNotExecuted, false},
		{"no data member", 200, `{"items":[]}`, VerdictUnknown, true},
		{"null data", 200, `{"data":null}`, VerdictUnknown, true},
		{"not JSON", 200, `<html>`, VerdictUnknown, true},
		{"404: no search endpoint", 404, `{"data":[]}`, VerdictUnknown, true},
		{"500", 500, `{"data":[]}`, VerdictUnknown, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked string
			r, err := lk(context.Background(), LookupRequest{Record: rec, Get: func(_ context.Context, path string) (int, []byte, error) {
				asked = path
				return tc.status, []byte(tc.body), nil
			}})
			assert.Equal(t, "/search?ref=a+b%26c", asked)
			assert.Equal(t, tc.want, r.Verdict)
			assert.Equal(t, tc.wantErr, err != nil, "error %v", err)
			if tc.want == VerdictExecuted {
				assert.Equal(t, `{"id":"p1"}`, string(r.Response.Body))
				assert.Equal(t, `lookup: 2 payment(s) with order "a b&c"`, r.Note)
			}
		})
	}
	_, err = lk(context.Background(), LookupRequest{Record: &keystore.Record{Request: keystore.Request{Body: []byte(`{}`)}},
		Get: func(context.Context, string) (int, []byte, error) {
			t.Fatal("no reference: nothing to ask")
			return 0, nil, nil
		}})
	require.Error(t, err)
}

// The reference is escaped for where the placeholder stands. Query-escaped in a path, a
// space became a "+" that the server read as a plus: the search found nothing and a charged
// payment was settled as not executed.
func TestLookupByReferenceEscapesByPosition(t *testing.T) {
	rec := &keystore.Record{Request: keystore.Request{Body: []byte(`{"reference":"order 42+a/b?c&d"}`)}}
	for _, tc := range []struct{ path, want string }{
		{"/v1/orders/{reference}/payments", "/v1/orders/order%2042+a%2Fb%3Fc&d/payments"},
		{"/v1/payments?reference={reference}", "/v1/payments?reference=order+42%2Ba%2Fb%3Fc%26d"},
		{"/v1/orders/{reference}/payments?ref={reference}", "/v1/orders/order%2042+a%2Fb%3Fc&d/payments?ref=order+42%2Ba%2Fb%3Fc%26d"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			lk, err := LookupByReference(tc.path, "")
			require.NoError(t, err)
			var asked string
			_, _ = lk(context.Background(), LookupRequest{Record: rec, Get: func(_ context.Context, path string) (int, []byte, error) {
				asked = path
				return 200, []byte(`{"data":[]}`), nil
			}})
			assert.Equal(t, tc.want, asked)
			// What a server reads back is the reference itself.
			u, err := url.Parse(asked)
			require.NoError(t, err)
			if strings.Contains(tc.path, "/orders/") {
				assert.Equal(t, "/v1/orders/order 42+a/b?c&d/payments", u.Path)
			}
			if strings.Contains(tc.path, "?") {
				assert.Equal(t, "order 42+a/b?c&d", u.Query().Get(strings.TrimSuffix(strings.SplitN(tc.path, "?", 2)[1], "={reference}")))
			}
		})
	}
}

func jsonID(t *testing.T, body []byte) string {
	t.Helper()
	var v struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(body, &v))
	return v.ID
}

// An executed verdict needs a 2xx answer: a succeeded record holding a 500 would make Do (and
// the Transport) return that 500 as a success. Resolve refuses it and writes nothing; a lookup
// answering it is inconclusive and the record stays manual.
func TestExecutedVerdictNeedsA2xxAnswer(t *testing.T) {
	for _, tc := range []struct {
		status int
		ok     bool
	}{
		{200, true}, {201, true}, {204, true}, {299, true},
		{100, false}, {199, false}, {302, false}, {400, false}, {409, false},
		{500, false}, {503, false}, {599, false},
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			var asked atomic.Int64
			viaLookup := payment(1, "r-lookup")
			e := newEnv(t, idemtest.Config{}, func(c *Config) {
				c.Lookup = func(ctx context.Context, req LookupRequest) (Resolution, error) {
					if req.Record.Key != viaLookup.Key() {
						return Resolution{}, nil // the other record waits for Resolve
					}
					asked.Add(1)
					return Resolution{Verdict: VerdictExecuted, Response: &keystore.Response{StatusCode: tc.status}}, nil
				}
			})
			e.srv.Script(idemtest.FaultStored500AfterCharge, idemtest.FaultStored500AfterCharge)
			ctx := context.Background()
			res, err := e.c.Do(ctx, viaLookup)
			assert.Equal(t, int64(1), asked.Load())
			if tc.ok {
				require.NoError(t, err)
				assert.Equal(t, tc.status, res.StatusCode)
				assert.Equal(t, outcome.SourceLookup, res.Source)
				assert.Equal(t, keystore.StateSucceeded, e.record(viaLookup.Key()).State)
			} else {
				require.ErrorIs(t, err, ErrStoredServerError)
				assert.Equal(t, keystore.StateManual, e.record(viaLookup.Key()).State)
			}

			byHand := payment(2, "r-hand")
			_, err = e.c.Do(ctx, byHand)
			require.ErrorIs(t, err, ErrStoredServerError)
			rec, err := e.c.Resolve(ctx, "", byHand.Key(), Resolution{Verdict: VerdictExecuted, Note: "ops",
				Response: &keystore.Response{StatusCode: tc.status}})
			if tc.ok {
				require.NoError(t, err)
				assert.Equal(t, keystore.StateSucceeded, rec.State)
				return
			}
			require.ErrorIs(t, err, ErrInvalidOperation)
			stored := e.record(byHand.Key())
			assert.Equal(t, keystore.StateManual, stored.State)
			assert.Equal(t, 500, stored.Response.StatusCode, "the stored answer is kept")
			// A not-executed verdict ignores the answer's status.
			rec, err = e.c.Resolve(ctx, "", byHand.Key(), Resolution{Verdict: VerdictNotExecuted, Note: "ops",
				Response: &keystore.Response{StatusCode: tc.status}})
			require.NoError(t, err)
			assert.Equal(t, keystore.StateFailed, rec.State)
		})
	}
	// nil Response: the documented empty 200.
	e := newEnv(t, idemtest.Config{}, nil)
	e.srv.Script(idemtest.FaultStored500AfterCharge)
	op := payment(1, "r-nil")
	_, err := e.c.Do(context.Background(), op)
	require.ErrorIs(t, err, ErrStoredServerError)
	rec, err := e.c.Resolve(context.Background(), "", op.Key(), Resolution{Verdict: VerdictExecuted, Note: "ops"})
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, rec.Response.StatusCode)
}

// A reference of "." or ".." in a path position is refused (verdict unknown, nothing asked):
// a proxy removing dot segments would turn the search into a list of every payment, read as
// the payment found. In a query it is a plain value.
func TestLookupByReferenceRefusesDotSegments(t *testing.T) {
	for _, ref := range []string{".", ".."} {
		rec := &keystore.Record{Request: keystore.Request{Body: []byte(`{"reference":"` + ref + `"}`)}}
		lk, err := LookupByReference("/v1/payments/by-reference/{reference}", "")
		require.NoError(t, err)
		r, err := lk(context.Background(), LookupRequest{Record: rec, Get: func(context.Context, string) (int, []byte, error) {
			t.Fatalf("asked for a dot segment %q", ref)
			return 0, nil, nil
		}})
		require.Error(t, err)
		assert.Equal(t, VerdictUnknown, r.Verdict)

		lk, err = LookupByReference("/v1/payments?reference={reference}", "")
		require.NoError(t, err)
		var asked string
		_, _ = lk(context.Background(), LookupRequest{Record: rec, Get: func(_ context.Context, p string) (int, []byte, error) {
			asked = p
			return 200, []byte(`{"data":[]}`), nil
		}})
		assert.Equal(t, "/v1/payments?reference="+ref, asked)
	}
}
