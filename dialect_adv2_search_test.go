package idem

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/profile"
)

// ckoDecline is a Checkout.com-like API where a declined card is a payment too (201,
// approved false, status Declined), listed by the search by reference like any other. The
// second payment of an order charges, and its answer is lost (the connection drops).
type ckoDecline struct {
	mu       sync.Mutex
	payments []map[string]any
	kept     map[string][]byte
}

func (s *ckoDecline) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch r.Method {
	case http.MethodPost:
		key := r.Header.Get("Cko-Idempotency-Key")
		if b, ok := s.kept[key]; ok {
			w.WriteHeader(201)
			w.Write(b)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var p struct{ Reference string }
		_ = json.Unmarshal(body, &p)
		n := len(s.payments)
		pay := map[string]any{"id": fmt.Sprintf("pay_%d", n), "reference": p.Reference, "approved": n > 0,
			"status": map[bool]string{true: "Authorized", false: "Declined"}[n > 0]}
		s.payments = append(s.payments, pay)
		out, _ := json.Marshal(pay)
		s.kept[key] = out
		if n == 1 { // charged; the answer never comes
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.Close()
			return
		}
		w.WriteHeader(201)
		w.Write(out)
	case http.MethodGet: // /v1/payments?reference=...: oldest first
		ref := r.URL.Query().Get("reference")
		var data []map[string]any
		for _, p := range s.payments {
			if p["reference"] == ref {
				data = append(data, p)
			}
		}
		b, _ := json.Marshal(map[string]any{"data": data})
		w.Write(b)
	}
}

func (s *ckoDecline) authorized() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range s.payments {
		if p["approved"] == true {
			n++
		}
	}
	return n
}

// The order's first try is declined (a payment object, 201); the application tries again
// under a new intent, whose charge succeeds but whose answer is lost. The search before the
// resend finds the order's payments and answers with the first one: the declined payment of
// the other intent. The application, told "declined", tries a third time: charged twice.
func TestDialectAdversarial2SearchNeverAnswersAnotherIntentsPayment(t *testing.T) {
	api := &ckoDecline{kept: map[string][]byte{}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	c, err := NewClient(Config{BaseURL: srv.URL, Store: keystore.NewMemory(), Profile: profile.Checkout,
		Budget: BudgetConfig{Disabled: true}})
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()

	try := func(n int) map[string]any {
		res, err := c.Do(ctx, NewOperation(http.MethodPost, "/v1/payments", paymentBody(100, "ord-1"), WithIntent(fmt.Sprintf("ord-1#%d", n))))
		require.NoError(t, err)
		var p map[string]any
		require.NoError(t, json.Unmarshal(res.Body, &p))
		t.Logf("intent #%d: %s (source %s)", n, res.Body, res.Source)
		return p
	}
	for n := 0; n < 3; n++ {
		if p := try(n); p["approved"] == true {
			break
		}
	}
	require.LessOrEqual(t, api.authorized(), 1, "ord-1 authorized %d times", api.authorized())
}
