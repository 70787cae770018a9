package idem

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
)

// switchServer answers every request on a path in switched with 101 Switching Protocols and
// then keeps the connection open saying nothing, until the test ends. It counts requests by
// path prefix.
func switchServer(t *testing.T, switched ...string) (url string, seen func(prefix string) int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	t.Cleanup(func() { close(done); ln.Close() })
	var posts, gets atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				if req.Method == http.MethodPost {
					posts.Add(1)
				} else {
					gets.Add(1)
				}
				for _, p := range switched {
					if strings.HasPrefix(req.URL.Path, p) {
						_, _ = c.Write([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n"))
						<-done
						return
					}
				}
				_, _ = c.Write([]byte("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"))
			}()
		}
	}()
	return "http://" + ln.Addr().String(), func(prefix string) int64 {
		if prefix == http.MethodPost {
			return posts.Load()
		}
		return gets.Load()
	}
}

// A 101 Switching Protocols answer (to the payment, to the status check) is a broken answer:
// its body, the raw connection, is never read, since no context or timeout ends that read.
// Before, Do blocked until the server closed the connection, holding the key's lease.
func TestSwitchingProtocolsAnswerIsNotRead(t *testing.T) {
	url, seen := switchServer(t, "/v1/payments", "/v1/idempotency-keys/")
	clock := newFakeClock()
	c, err := NewClient(Config{BaseURL: url, Store: keystore.NewMemory(), KeyStatusURL: "/v1/idempotency-keys/{key}",
		Now: clock.Now, Sleep: clock.Sleep, Budget: BudgetConfig{Disabled: true},
		Policy: Policy{MaxAttempts: 3, MaxKeyStatusChecks: 2}})
	require.NoError(t, err)
	defer c.Close()

	done := make(chan error, 1)
	go func() {
		_, err := c.Do(context.Background(), NewOperation(http.MethodPost, "/v1/payments", paymentBody(1, "order-101")))
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second): // a hang, not a timing bound: Do returns at once
		t.Fatal("Do blocked on a 101 answer's body")
	}
	require.ErrorIs(t, err, ErrOutcomeUnknown, "the payment may have reached the server: never a failure")
	assert.Contains(t, err.Error(), "101 Switching Protocols")
	assert.Equal(t, int64(1), seen(http.MethodPost), "not resent while the status endpoint cannot tell")
	assert.Equal(t, int64(2), seen(http.MethodGet), "every status check asked, none read past its 101")
}

// The same for a safe request through the Transport: the 101 is never handed to the caller,
// whose read of its body no AttemptTimeout would end.
func TestSwitchingProtocolsOnASafeRequest(t *testing.T) {
	url, seen := switchServer(t, "/v1/payments")
	clock := newFakeClock()
	c, err := NewClient(Config{BaseURL: url, Store: keystore.NewMemory(), Now: clock.Now, Sleep: clock.Sleep,
		Budget: BudgetConfig{Disabled: true}, Policy: Policy{MaxAttempts: 2}})
	require.NoError(t, err)
	defer c.Close()

	done := make(chan error, 1)
	go func() {
		resp, err := NewHTTPClient(c).Get(url + "/v1/payments/pay_1")
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second): // a hang, not a timing bound
		t.Fatal("a safe GET blocked on a 101 answer")
	}
	require.Error(t, err)
	assert.Contains(t, err.Error(), "101 Switching Protocols")
	assert.Equal(t, int64(2), seen(http.MethodGet), "a safe request is retried within MaxAttempts")
}

// nilTransport breaks the RoundTripper contract: no response and no error.
type nilTransport struct{}

func (nilTransport) RoundTrip(*http.Request) (*http.Response, error) { return nil, nil }

// A transport answering (nil, nil) is an attempt that failed, not a panic on the caller's
// goroutine (http.Client turns it into an error; the attempt transport did not).
func TestNilResponseFromTheTransportIsAnError(t *testing.T) {
	clock := newFakeClock()
	c, err := NewClient(Config{BaseURL: "http://api.example", HTTPClient: &http.Client{Transport: nilTransport{}},
		Store: keystore.NewMemory(), Now: clock.Now, Sleep: clock.Sleep, Budget: BudgetConfig{Disabled: true},
		Policy: Policy{MaxAttempts: 2}})
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Do(context.Background(), NewOperation(http.MethodPost, "/v1/payments", paymentBody(1, "order-nil")))
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	assert.Contains(t, err.Error(), "neither a response nor an error")
}
