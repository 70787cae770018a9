package idem

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
)

// gatewayTimeout answers the first payment POST with a gateway's 504 (no Transient-Error
// header: a proxy does not speak Adyen) and holds the request; release() delivers it to
// the API later, as a load balancer's queue would.
type gatewayTimeout struct {
	base     http.RoundTripper
	mu       sync.Mutex
	held     *http.Request
	heldBody []byte
	done     bool
}

func (g *gatewayTimeout) RoundTrip(r *http.Request) (*http.Response, error) {
	g.mu.Lock()
	first := !g.done && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/v1/payments")
	if first {
		g.done = true
		b := make([]byte, r.ContentLength)
		_, _ = r.Body.Read(b)
		r.Body.Close()
		g.held, g.heldBody = r.Clone(context.Background()), b
	}
	g.mu.Unlock()
	if first {
		return &http.Response{StatusCode: http.StatusGatewayTimeout, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	}
	return g.base.RoundTrip(r)
}

func (g *gatewayTimeout) release(t *testing.T) {
	req := g.held
	req.Body = io.NopCloser(bytes.NewReader(g.heldBody))
	req.RequestURI = ""
	resp, err := http.DefaultTransport.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	t.Logf("held request delivered late: HTTP %d", resp.StatusCode)
}

func TestDialectAdversarialAdyenGateway504CancelThenLateLandingNeverChargesTwice(t *testing.T) {
	srv := idemtest.NewServer(idemtest.Config{Dialect: idemtest.DialectAdyen})
	defer srv.Close()
	gw := &gatewayTimeout{base: http.DefaultTransport}
	c, err := NewClient(Config{BaseURL: srv.URL, Store: keystore.NewMemory(), Profile: syncAdyen,
		HTTPClient: &http.Client{Transport: gw}, Budget: BudgetConfig{Disabled: true}})
	require.NoError(t, err)
	defer c.Close()

	_, err = c.Do(context.Background(), NewOperation(http.MethodPost, idemtest.PaymentsPath, paymentBody(100, "ord-1"), WithIntent("ord-1#0")))
	t.Logf("first Do: %v", err)
	if errors.Is(err, ErrNotExecuted) { // the application's one verdict to pay again
		_, err = c.Do(context.Background(), NewOperation(http.MethodPost, idemtest.PaymentsPath, paymentBody(100, "ord-1"), WithIntent("ord-1#1")))
		require.NoError(t, err)
	}
	gw.release(t) // the first request, queued behind the gateway, reaches the API
	charged, canceled := srv.ChargesByReference("ord-1")
	require.LessOrEqual(t, charged-canceled, 1, "ord-1 charged %d times net of %d cancels", charged, canceled)
}
