package outcome

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rcResp builds an Attempt that got a response with code and the given header pairs.
func rcResp(code int, kv ...string) *Attempt {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return &Attempt{Number: 1, Response: &http.Response{StatusCode: code, Header: h}, Written: true}
}

// rcErr builds an Attempt whose transport failed with err.
func rcErr(err error, written bool) *Attempt {
	return &Attempt{Number: 1, Err: err, Written: written}
}

func TestDefaultClassifiersTable(t *testing.T) {
	dialRefused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	tests := []struct {
		name string
		a    *Attempt
		want Class
	}{
		// 2xx
		{"200", rcResp(200), ClassSuccess},
		{"201", rcResp(201), ClassSuccess},
		{"202", rcResp(202), ClassSuccess},
		{"204", rcResp(204), ClassSuccess},
		{"299", rcResp(299), ClassSuccess},

		// transport errors
		{"dial refused, not written", rcErr(dialRefused, false), ClassRetry},
		{"EOF, not written", rcErr(io.EOF, false), ClassRetry},
		{"reset after write", rcErr(syscall.ECONNRESET, true), ClassUnknown},
		{"EOF after write", rcErr(io.ErrUnexpectedEOF, true), ClassUnknown},
		{"timeout after write", rcErr(fmt.Errorf("attempt: %w", errors.New("timeout awaiting headers")), true), ClassUnknown},
		{"notSentError even if Written", rcErr(NotSent(dialRefused), true), ClassRetry},
		{"wrapped notSentError", rcErr(fmt.Errorf("send: %w", NotSent(io.EOF)), true), ClassRetry},

		// may have executed
		{"408", rcResp(408), ClassUnknown},
		{"425", rcResp(425), ClassUnknown},
		{"500", rcResp(500), ClassUnknown},
		{"502", rcResp(502), ClassUnknown},
		{"504", rcResp(504), ClassUnknown},
		{"599", rcResp(599), ClassUnknown},
		{"501", rcResp(501), ClassUnknown},

		// not executed
		{"429", rcResp(429), ClassRetry},
		{"503", rcResp(503), ClassRetry},

		// draft rows
		{"409 in progress", rcResp(409), ClassInProgress},
		{"422 without a body is validation", rcResp(422), ClassPermanent},

		// permanent 4xx
		{"400", rcResp(400), ClassPermanent},
		{"401", rcResp(401), ClassPermanent},
		{"403", rcResp(403), ClassPermanent},
		{"404", rcResp(404), ClassPermanent},
		{"405", rcResp(405), ClassPermanent},
		{"410", rcResp(410), ClassPermanent},
		{"413", rcResp(413), ClassPermanent},
		{"415", rcResp(415), ClassPermanent},
		{"418", rcResp(418), ClassPermanent},
		{"499", rcResp(499), ClassPermanent},

		// 3xx: a redirect not followed proves nothing of the effect (a 303 says it happened)
		{"301", rcResp(301), ClassUnknown},
		{"302", rcResp(302), ClassUnknown},
		{"303", rcResp(303), ClassUnknown},
		{"304", rcResp(304), ClassUnknown},
		{"307", rcResp(307), ClassUnknown},
		{"399", rcResp(399), ClassUnknown},

		// odd codes
		{"1xx", rcResp(100), ClassUnknown},
		{"600", rcResp(600), ClassUnknown},
		{"no response, no error", &Attempt{}, ClassUnknown},

		// Stripe-Should-Retry overrides the status row
		{"500 + Should-Retry true", rcResp(500, "Stripe-Should-Retry", "true"), ClassRetry},
		{"400 + Should-Retry true", rcResp(400, "Stripe-Should-Retry", "true"), ClassRetry},
		{"303 + Should-Retry true", rcResp(303, "Stripe-Should-Retry", "true"), ClassUnknown},
		{"307 + Should-Retry true", rcResp(307, "Stripe-Should-Retry", "true"), ClassUnknown},
		{"1xx + Should-Retry true", rcResp(100, "Stripe-Should-Retry", "true"), ClassUnknown},
		// "false" never makes a possibly executed answer a failure
		{"408 + Should-Retry false", rcResp(408, "Stripe-Should-Retry", "false"), ClassUnknown},
		{"409 + Should-Retry false", rcResp(409, "Stripe-Should-Retry", "false"), ClassInProgress},
		{"425 + Should-Retry false", rcResp(425, "Stripe-Should-Retry", "false"), ClassUnknown},
		{"500 + Should-Retry false", rcResp(500, "Stripe-Should-Retry", "false"), ClassStoredServerError},
		{"501 + Should-Retry false", rcResp(501, "Stripe-Should-Retry", "false"), ClassStoredServerError},
		{"502 + Should-Retry false", rcResp(502, "Stripe-Should-Retry", "false"), ClassStoredServerError},
		{"503 + Should-Retry false", rcResp(503, "Stripe-Should-Retry", "false"), ClassStoredServerError},
		{"504 + Should-Retry false", rcResp(504, "Stripe-Should-Retry", "false"), ClassStoredServerError},
		{"599 + Should-Retry false", rcResp(599, "Stripe-Should-Retry", "false"), ClassStoredServerError},
		// it confirms a final answer
		{"400 + Should-Retry false", rcResp(400, "Stripe-Should-Retry", "false"), ClassPermanent},
		{"401 + Should-Retry false", rcResp(401, "Stripe-Should-Retry", "false"), ClassPermanent},
		{"402 + Should-Retry false", rcResp(402, "Stripe-Should-Retry", "false"), ClassPermanent},
		{"404 + Should-Retry false", rcResp(404, "Stripe-Should-Retry", "false"), ClassPermanent},
		{"422 + Should-Retry false", rcResp(422, "Stripe-Should-Retry", "false"), ClassPermanent},
		{"429 + Should-Retry false", rcResp(429, "Stripe-Should-Retry", "false"), ClassPermanent},
		{"302 + Should-Retry false", rcResp(302, "Stripe-Should-Retry", "false"), ClassUnknown},
		{"1xx + Should-Retry false", rcResp(100, "Stripe-Should-Retry", "false"), ClassUnknown},
		{"Should-Retry case and spaces", rcResp(500, "Stripe-Should-Retry", " TRUE "), ClassRetry},
		{"Should-Retry other value ignored", rcResp(500, "Stripe-Should-Retry", "maybe"), ClassUnknown},
		{"Should-Retry empty ignored", rcResp(400, "Stripe-Should-Retry", ""), ClassPermanent},
		{"Should-Retry false on 2xx ignored", rcResp(200, "Stripe-Should-Retry", "false"), ClassSuccess},
		{"Should-Retry true on 2xx ignored", rcResp(201, "Stripe-Should-Retry", "true"), ClassSuccess},
		{"written transport error without response", &Attempt{Err: io.EOF, Written: true}, ClassUnknown},

		// replayed answers
		{"500 replayed", rcResp(500, "Idempotent-Replayed", "true"), ClassStoredServerError},
		{"502 replayed", rcResp(502, "Idempotent-Replayed", "TRUE"), ClassStoredServerError},
		{"400 replayed", rcResp(400, "Idempotent-Replayed", "true"), ClassPermanent},
		{"303 replayed", rcResp(303, "Idempotent-Replayed", "true"), ClassStoredServerError},
		{"201 replayed is success", rcResp(201, "Idempotent-Replayed", "true"), ClassSuccess},
		{"500 replayed false", rcResp(500, "Idempotent-Replayed", "false"), ClassUnknown},
		// A stored 5xx is replayed to every resend of the key: a "retry" hint cannot change it.
		{"replay beats hint", rcResp(500, "Idempotent-Replayed", "true", "Stripe-Should-Retry", "true"), ClassStoredServerError},
	}
	cs := DefaultClassifiers()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, cs.Classify(tt.a), "got %s, want %s", cs.Classify(tt.a), tt.want)
		})
	}
}

func TestDefaultClassifiersNilHeader(t *testing.T) {
	a := &Attempt{Response: &http.Response{StatusCode: 500}} // Header nil: Get must not panic
	assert.Equal(t, ClassUnknown, DefaultClassifiers().Classify(a))
}

func TestClassifiersOrdering(t *testing.T) {
	var calls []string
	rec := func(name string, c Class) Classifier {
		return ClassifierFunc(func(*Attempt) Class { calls = append(calls, name); return c })
	}

	t.Run("prepended custom classifier wins", func(t *testing.T) {
		cs := append(Classifiers{ClassifierFunc(func(a *Attempt) Class {
			if a.StatusCode() == http.StatusInternalServerError {
				return ClassRetry
			}
			return ClassUndecided
		})}, DefaultClassifiers()...)
		assert.Equal(t, ClassRetry, cs.Classify(rcResp(500)))
		assert.Equal(t, ClassPermanent, cs.Classify(rcResp(400)), "undecided falls through to the defaults")
	})

	t.Run("first decisive answer wins and later ones are not asked", func(t *testing.T) {
		calls = nil
		cs := Classifiers{rec("a", ClassUndecided), rec("b", ClassPermanent), rec("c", ClassSuccess)}
		assert.Equal(t, ClassPermanent, cs.Classify(rcResp(200)))
		assert.Equal(t, []string{"a", "b"}, calls)
	})

	t.Run("nil entries skipped", func(t *testing.T) {
		calls = nil
		cs := Classifiers{nil, rec("a", ClassInProgress), nil}
		assert.Equal(t, ClassInProgress, cs.Classify(rcResp(200)))
		assert.Equal(t, []string{"a"}, calls)
	})

	t.Run("undecided by all is unknown", func(t *testing.T) {
		calls = nil
		cs := Classifiers{rec("a", ClassUndecided), nil, rec("b", ClassUndecided)}
		assert.Equal(t, ClassUnknown, cs.Classify(rcResp(200)))
		assert.Equal(t, []string{"a", "b"}, calls)
	})

	t.Run("empty list is unknown", func(t *testing.T) {
		assert.Equal(t, ClassUnknown, Classifiers(nil).Classify(rcResp(200)))
		assert.Equal(t, ClassUnknown, Classifiers{}.Classify(rcResp(200)))
	})
}

func TestIndividualClassifiersAreUndecidedOutsideTheirRow(t *testing.T) {
	// Each default classifier must leave other rows to the next one.
	assert.Equal(t, ClassUndecided, HintHeader("Stripe-Should-Retry").Classify(rcResp(500)))
	assert.Equal(t, ClassUndecided, HintHeader("Stripe-Should-Retry").Classify(rcErr(io.EOF, true)))
	assert.Equal(t, ClassRetry, HintHeader("X-Retry-Hint").Classify(rcResp(500, "X-Retry-Hint", "true")))
	assert.Equal(t, ClassUndecided, HintHeader("X-Retry-Hint").Classify(rcResp(500, "Stripe-Should-Retry", "true")))
	assert.Equal(t, ClassUndecided, ClassifyReplay(rcResp(500)))
	assert.Equal(t, ClassUndecided, ClassifyReplay(rcResp(299, "Idempotent-Replayed", "true")))
	assert.Equal(t, ClassStoredServerError, ClassifyReplay(rcResp(399, "Idempotent-Replayed", "true")))
	assert.Equal(t, ClassUndecided, ClassifyReplay(rcErr(io.EOF, true)))
	assert.Equal(t, ClassUndecided, ClassifyTransport(rcResp(500)))
	assert.Equal(t, ClassUndecided, ClassifyStatusCode(rcErr(io.EOF, true)))
}

func TestAttemptStatusCode(t *testing.T) {
	assert.Equal(t, 0, (&Attempt{}).StatusCode())
	assert.Equal(t, 418, rcResp(418).StatusCode())
}

func TestClassString(t *testing.T) {
	tests := []struct {
		c    Class
		want string
	}{
		{ClassUndecided, "undecided"},
		{ClassSuccess, "success"},
		{ClassRetry, "retry"},
		{ClassUnknown, "unknown"},
		{ClassInProgress, "in-progress"},
		{ClassKeyConflict, "key-conflict"},
		{ClassPermanent, "permanent"},
		{ClassStoredServerError, "stored-server-error"},
		{ClassDone, "done"},
		{Class(9), "class(9)"},
		{Class(-1), "class(-1)"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.c.String())
	}
	require.Len(t, classNames, int(ClassDone)+1, "every class has a name")
}

func TestNotSentError(t *testing.T) {
	err := NotSent(io.EOF)
	assert.Equal(t, "request not sent: EOF", err.Error())
	assert.ErrorIs(t, err, io.EOF)
}
