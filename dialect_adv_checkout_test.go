package idem

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/profile"
)

// cko is a Checkout.com-like API: only 2xx answers are kept under a key; its first payment
// charges and then answers 500 (not kept: the same key executes again). It also offers a
// status-by-key endpoint in idem's convention, which can only know kept keys, and the
// consistent search by reference.
type cko struct {
	mu      sync.Mutex
	kept    map[string][]byte
	charges map[string]int // per reference
	posts   int
}

func newCko() *cko { return &cko{kept: map[string][]byte{}, charges: map[string]int{}} }

func (s *cko) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/payments":
		key := r.Header.Get("Cko-Idempotency-Key")
		if b, ok := s.kept[key]; ok {
			w.WriteHeader(201)
			w.Write(b)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var p struct{ Reference string }
		_ = json.Unmarshal(body, &p)
		s.charges[p.Reference]++
		s.posts++
		out, _ := json.Marshal(map[string]any{"id": "pay_x", "reference": p.Reference, "status": "succeeded"})
		if s.posts == 1 { // charged, then a 500: nothing kept
			w.WriteHeader(500)
			w.Write([]byte(`{"error_type":"internal"}`))
			return
		}
		s.kept[key] = out
		w.WriteHeader(201)
		w.Write(out)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/payments/operations/"):
		key := strings.TrimPrefix(r.URL.Path, "/v1/payments/operations/")
		if b, ok := s.kept[key]; ok {
			json.NewEncoder(w).Encode(map[string]any{"status": "completed", "response_status": 201, "response_body": json.RawMessage(b)})
			return
		}
		w.WriteHeader(404)
		w.Write([]byte(`{"status":"not_found"}`))
	case r.Method == http.MethodGet && r.URL.Path == "/v1/payments":
		ref := r.URL.Query().Get("reference")
		data := []any{}
		for i := 0; i < s.charges[ref]; i++ {
			data = append(data, map[string]any{"id": "pay_x", "reference": ref, "status": "succeeded"})
		}
		json.NewEncoder(w).Encode(map[string]any{"data": data})
	default:
		w.WriteHeader(404)
	}
}

func payOnce(t *testing.T, cfg Config, opts ...CallOption) {
	c, err := NewClient(cfg)
	if err != nil {
		t.Logf("NewClient refused: %v", err)
		return
	}
	defer c.Close()
	res, err := c.Do(context.Background(), NewOperation(http.MethodPost, "/v1/payments", paymentBody(100, "ord-1")), opts...)
	t.Logf("Do: %v %v", res, err)
}

// Checkout's profile with Config.KeyStatusURL: the status check replaces the search, and a
// key status of "not found" is what a nothing-on-error provider says of a charged key.
func TestDialectAdversarialCheckoutWithKeyStatusURLNeverChargesTwice(t *testing.T) {
	s := newCko()
	srv := httptest.NewServer(s)
	defer srv.Close()
	payOnce(t, Config{BaseURL: srv.URL, Store: keystore.NewMemory(), Profile: profile.Checkout,
		KeyStatusURL: "/v1/payments/operations/{key}", Budget: BudgetConfig{Disabled: true}})
	require.LessOrEqual(t, s.charges["ord-1"], 1, "ord-1 charged %d times", s.charges["ord-1"])
}

// The same with a per-call status function.
func TestDialectAdversarialCheckoutWithCallKeyStatusNeverChargesTwice(t *testing.T) {
	s := newCko()
	srv := httptest.NewServer(s)
	defer srv.Close()
	payOnce(t, Config{BaseURL: srv.URL, Store: keystore.NewMemory(), Profile: profile.Checkout,
		Budget: BudgetConfig{Disabled: true}}, CallKeyStatusURL("/v1/payments/operations/{key}"))
	require.LessOrEqual(t, s.charges["ord-1"], 1, "ord-1 charged %d times", s.charges["ord-1"])
}

// A custom nothing-on-error profile whose settling route is a status by key: Validate
// accepts it (a KeyStatus ahead of the Resend counts as a search).
func TestDialectAdversarialNothingOnErrorKeyStatusProfileIsRefusedAndNeverChargesTwice(t *testing.T) {
	p := profile.Checkout.Clone()
	p.Name = "checkout-keystatus"
	p.Settle = []profile.Route{{Kind: profile.KeyStatus, Path: "/v1/payments/operations/{key}"}, {Kind: profile.Resend}}
	require.ErrorIs(t, p.Validate(), profile.ErrInvalid, "a status by key cannot say a key that charged and failed is not there")
	s := newCko()
	srv := httptest.NewServer(s)
	defer srv.Close()
	payOnce(t, Config{BaseURL: srv.URL, Store: keystore.NewMemory(), Profile: p, Budget: BudgetConfig{Disabled: true}})
	require.LessOrEqual(t, s.charges["ord-1"], 1, "ord-1 charged %d times", s.charges["ord-1"])
}

// Control: the plain Checkout profile searches first and finds the charge.
func TestDialectAdversarialCheckoutControl(t *testing.T) {
	s := newCko()
	srv := httptest.NewServer(s)
	defer srv.Close()
	payOnce(t, Config{BaseURL: srv.URL, Store: keystore.NewMemory(), Profile: profile.Checkout, Budget: BudgetConfig{Disabled: true}})
	require.LessOrEqual(t, s.charges["ord-1"], 1, "ord-1 charged %d times", s.charges["ord-1"])
}
