package idemdbos

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

// DoAs with a zero Step (a caller's bug: a Step never filled in) is refused, not sent under
// the one key every zero Step shares.
func TestDoAsRefusesAZeroStep(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"id":"pay_1"}`))
	}))
	defer srv.Close()
	c, err := idem.NewClient(idem.Config{BaseURL: srv.URL, Store: keystore.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"amount":100}`)
	r1, err1 := p.DoAs(context.Background(), Step{}, "POST", "/v1/payments", body, nil)
	r2, err2 := p.DoAs(context.Background(), Step{}, "POST", "/v1/payments", body, nil)
	t.Logf("zero Step key %s intent %q; first %v %v, second %v %v, server saw %d", Step{}.Key(), Step{}.Intent(), r1 != nil, err1, r2 != nil, err2, hits.Load())
	if err1 == nil || err2 == nil || hits.Load() != 0 {
		t.Errorf("DoAs(Step{}) sent a payment under the key every zero Step shares (%s); a second order's zero Step got the first's answer replayed (server saw %d request(s) for 2 payments)", Step{}.Key(), hits.Load())
	}
	if !errors.Is(err1, idem.ErrInvalidOperation) {
		t.Errorf("DoAs(Step{}) = %v, want idem.ErrInvalidOperation", err1)
	}
}
