package idem

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/outcome"
)

// untracedTransport sends through net/http without the request's httptrace, as a transport
// of its own (an HTTP/3 client, a hand-written one) does: GotConn never fires.
type untracedTransport struct{ failBeforeSend bool }

func (t untracedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.failBeforeSend && r.Method == http.MethodPost { // status asks (GET) go through
		return nil, errors.New("untraced: refused before sending")
	}
	return http.DefaultTransport.RoundTrip(r.WithContext(context.Background()))
}

// Through a transport that reports no GotConn, a transport error is an outcome unknown: the
// status endpoint is asked before any resend. Taken as "not sent", a payment executed and
// then dropped was resent, and the record said "not executed": a later Do resent the key
// without asking, even past KeyTTL, when the server has forgotten it and charges again.
func TestUntracedTransportErrorIsUnknown(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, func(c *Config) {
		c.HTTPClient = &http.Client{Transport: untracedTransport{}}
	})
	e.srv.Script(idemtest.FaultDropAfterCommit) // executed, stored, the connection dropped
	res, err := e.c.Do(context.Background(), payment(4200, "untraced"), CallMaxAttempts(3))
	require.NoError(t, err)
	assert.Equal(t, outcome.SourceKeyStatus, res.Source)
	assert.Equal(t, 1, res.Attempts)
	assert.Equal(t, 1, e.srv.Stats().KeyStatusChecks)
	assert.Equal(t, 1, e.srv.ExecutionsByReference("untraced"))
}

// An untraced transport that fails before sending is still asked about: idem cannot tell.
// The status endpoint's not_found does not make the record "not executed" either: a request
// idem cannot prove unsent may still arrive, so the next call asks again before sending.
func TestUntracedTransportUnsentIsAsked(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, func(c *Config) {
		c.HTTPClient = &http.Client{Transport: untracedTransport{failBeforeSend: true}}
	})
	_, err := e.c.Do(context.Background(), payment(4200, "unsent"), CallMaxAttempts(3))
	oe := opErr(t, err)
	assert.ErrorIs(t, err, ErrExhausted)
	assert.False(t, oe.Unknown)
	assert.Equal(t, 3, oe.Attempts)
	assert.Equal(t, 3, e.srv.Stats().KeyStatusChecks, "a status ask after each attempt")
	assert.Equal(t, 0, e.srv.Stats().Requests)
	assert.False(t, e.record(oe.Key).NotExecuted, "the next call asks first")
}

// net/http's Transport reports GotConn, so an error before a connection (a refused dial) is
// still known unsent: no status ask, and the record says nothing was executed.
func TestTracedTransportDialErrorIsNotSent(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, nil)
	_, err := e.c.Do(context.Background(), NewOperation(http.MethodPost, "http://127.0.0.1:1/v1/payments", paymentBody(4200, "refused")), CallMaxAttempts(2)) // nothing listens on port 1
	oe := opErr(t, err)
	assert.ErrorIs(t, err, ErrExhausted)
	assert.False(t, oe.Unknown)
	assert.Equal(t, 0, e.srv.Stats().KeyStatusChecks)
	assert.True(t, e.record(oe.Key).NotExecuted)
}

// net/http hands a request to a RoundTripper registered with RegisterProtocol before its
// connection pool, so neither hook fires: the dropped, executed attempt is unknown, the
// status endpoint says completed, and nothing is recorded "not executed".
func TestRegisteredProtocolErrorIsUnknown(t *testing.T) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.RegisterProtocol("http", untracedTransport{})
	e := newEnv(t, idemtest.Config{}, func(c *Config) { c.HTTPClient = &http.Client{Transport: tr} })
	e.srv.Script(idemtest.FaultDropAfterCommit)
	res, err := e.c.Do(context.Background(), payment(4200, "alt"), CallMaxAttempts(1))
	require.NoError(t, err)
	assert.Equal(t, outcome.SourceKeyStatus, res.Source)
	assert.Equal(t, 1, e.srv.ExecutionsByReference("alt"))
}

// wrappingTransport passes the request, context and trace included, to net/http's
// Transport, as instrumentation wrappers do.
type wrappingTransport struct{ next http.RoundTripper }

func (w wrappingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return w.next.RoundTrip(r)
}

// A wrapper may hide a Transport whose protocol handlers skip GotConn, so through it even a
// refused dial is asked about: one status ask per attempt; their not_found does not make
// the record "not executed" (the request may still arrive), so the next call asks first.
func TestWrappedTransportErrorIsAsked(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, func(c *Config) {
		c.HTTPClient = &http.Client{Transport: wrappingTransport{http.DefaultTransport.(*http.Transport).Clone()}}
	})
	_, err := e.c.Do(context.Background(), NewOperation(http.MethodPost, "http://127.0.0.1:1/v1/payments", paymentBody(4200, "wrapped")), CallMaxAttempts(2))
	oe := opErr(t, err)
	assert.ErrorIs(t, err, ErrExhausted)
	assert.False(t, oe.Unknown)
	assert.Equal(t, 2, e.srv.Stats().KeyStatusChecks)
	assert.False(t, e.record(oe.Key).NotExecuted, "the next call asks first")
}

// alpnConn is what a TLSNextProto handler returns (as x/net/http2's NewClientConn does): a
// RoundTripper bound to the negotiated connection, which writes on it itself. net/http
// reports no GotConn for such a connection.
type alpnConn struct {
	mu sync.Mutex
	c  *tls.Conn
	br *bufio.Reader
}

func (a *alpnConn) RoundTrip(r *http.Request) (*http.Response, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := r.Write(a.c); err != nil {
		return nil, err
	}
	return http.ReadResponse(a.br, r)
}

// Through a Transport with a TLSNextProto handler of its own, GetConn fires and GotConn never
// does: a dropped, executed attempt is still an outcome unknown, asked about, not recorded
// "not executed". net/http's own HTTP/2 handlers keep the precise answer (provesUnsent).
func TestCustomNextProtoErrorIsUnknown(t *testing.T) {
	h := idemtest.NewHandler(idemtest.Config{})
	srv := httptest.NewUnstartedServer(h)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
	tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{
		"http/1.1": func(_ string, c *tls.Conn) http.RoundTripper { return &alpnConn{c: c, br: bufio.NewReader(c)} },
	}
	e := newEnv(t, idemtest.Config{}, func(c *Config) {
		c.BaseURL, c.HTTPClient = srv.URL, &http.Client{Transport: tr}
	})
	h.Script(idemtest.FaultDropAfterCommit)
	// The status asks go through this handler too: when net/http hands them its dead
	// connection they fail and the call ends unknown, the record one a later call must ask
	// about; on a fresh connection the ask finds the stored 201. Never "not executed".
	op := payment(4200, "alpn")
	res, err := e.c.Do(context.Background(), op, CallMaxAttempts(1))
	if err != nil {
		assert.ErrorIs(t, err, ErrOutcomeUnknown)
		assert.False(t, e.record(op.Key()).NotExecuted)
	} else {
		assert.Equal(t, outcome.SourceKeyStatus, res.Source)
	}
	assert.Equal(t, 1, h.Stats().Requests)
	assert.Equal(t, 1, h.ExecutionsByReference("alpn"))

	assert.True(t, provesUnsent(http.DefaultTransport), "net/http's own HTTP/2 handlers")
	assert.True(t, provesUnsent(srv.Client().Transport))
	assert.False(t, provesUnsent(tr))
}

// A Credentials function that makes a request of its own with the attempt's context fires
// the attempt's hooks; they are reset after it, so its failed dial does not make the payment
// that follows, written unseen through a registered protocol, look unsent.
func TestCredentialsRequestDoesNotMarkUnsent(t *testing.T) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.RegisterProtocol("http", untracedTransport{})
	e := newEnv(t, idemtest.Config{}, func(c *Config) {
		c.HTTPClient = &http.Client{Transport: tr}
		c.Credentials = func(r *http.Request) error {
			refresh, err := http.NewRequestWithContext(r.Context(), http.MethodPost, "http://127.0.0.1:1/token", nil)
			require.NoError(t, err)
			if resp, err := http.DefaultTransport.RoundTrip(refresh); err == nil { // refused: nothing listens
				resp.Body.Close()
			}
			r.Header.Set("Authorization", "Bearer cached")
			return nil
		}
	})
	e.srv.Script(idemtest.FaultDropAfterCommit)
	res, err := e.c.Do(context.Background(), payment(4200, "cred"), CallMaxAttempts(1))
	require.NoError(t, err)
	assert.Equal(t, outcome.SourceKeyStatus, res.Source)
	assert.Equal(t, 1, e.srv.ExecutionsByReference("cred"))
}
