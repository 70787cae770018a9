package idemriver

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore"
)

// NewPayment and InsertTx refuse, before anything is inserted, exactly the args that idem's
// Client.Do refuses at run time; args they accept are sent by Do.
func TestNewPaymentAgreesWithDo(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"p"}`))
	}))
	defer srv.Close()
	c, err := idem.NewClient(idem.Config{BaseURL: srv.URL, Store: keystore.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, ref, method, url string
		ok                     bool
	}{
		{"plain", "ord-0", "POST", "/v1/payments", true},
		{"absolute under base", "ord-1", "POST", srv.URL + "/v1/payments", true},
		{"lower-case token method", "ord-2", "post", "/v1/payments", true},
		{"escaped query", "ord-3", "POST", "/v1/payments?a=b%20c", true},
		{"bad utf8 reference", "ord-\xff", "POST", "/v1/payments", false},
		{"bad url escape", "ord-4", "POST", "/v1/%zz", false},
		{"newline in url", "ord-5", "POST", "/v1/pay\nments", false},
		{"space in method", "ord-6", "PO ST", "/v1/payments", false},
		{"ftp scheme", "ord-7", "POST", "ftp://x/y", false},
		{"no host", "ord-8", "POST", "https:///v1/payments", false},
		{"user info", "ord-9", "POST", "https://u:p@x.example/v1/payments", false},
		{"space in query", "ord-10", "POST", "/v1/payments?a=b c", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := hits.Load()
			a, err := NewPayment(tc.ref, tc.method, tc.url, []byte(`{}`))
			if !tc.ok {
				if !errors.Is(err, ErrInvalidPayment) || !errors.Is(err, idem.ErrInvalidOperation) {
					t.Fatalf("NewPayment: %v, want ErrInvalidPayment and idem.ErrInvalidOperation", err)
				}
				// InsertTx refuses the same args before it looks at the River client.
				a = PaymentArgs{Key: "0190f6c4-0000-7000-8000-000000000001", Reference: tc.ref, Method: tc.method, URL: tc.url}
				if _, err := InsertTx[struct{}](context.Background(), nil, struct{}{}, a, nil); !errors.Is(err, ErrInvalidPayment) || !errors.Is(err, idem.ErrInvalidOperation) {
					t.Fatalf("InsertTx: %v, want ErrInvalidPayment and idem.ErrInvalidOperation", err)
				}
				// Do agrees: the same operation is refused, nothing sent.
				if _, err := c.Do(context.Background(), a.Operation()); !errors.Is(err, idem.ErrInvalidOperation) {
					t.Fatalf("Do: %v, want idem.ErrInvalidOperation (check and Do disagree)", err)
				}
				if n := hits.Load() - before; n != 0 {
					t.Fatalf("%d request(s) sent for refused args", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewPayment: %v", err)
			}
			if _, err := c.Do(context.Background(), a.Operation()); err != nil {
				t.Fatalf("Do refuses args NewPayment accepted: %v", err)
			}
			if n := hits.Load() - before; n != 1 {
				t.Fatalf("%d request(s) sent, want 1", n)
			}
		})
	}
}
