package idem

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/profile"
)

// An Increase-like API whose list ignores (or loosely matches) the idempotency_key filter
// and returns the account's payments: the first payment of another key is taken as this
// key's answer, and an order that was never charged is reported succeeded.
func TestDialectAdversarialIncreaseListByKeyIgnoresAnotherKeysCharge(t *testing.T) {
	var mu sync.Mutex
	charges := map[string]int{}
	var list []map[string]any
	posts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet { // ?idempotency_key=K, filter not applied
			json.NewEncoder(w).Encode(map[string]any{"data": list})
			return
		}
		posts++
		body, _ := io.ReadAll(r.Body)
		var p struct{ Reference string }
		_ = json.Unmarshal(body, &p)
		if posts == 2 { // ord-2's first request: lost at the gateway, never executed
			w.WriteHeader(http.StatusGatewayTimeout)
			return
		}
		charges[p.Reference]++
		pay := map[string]any{"id": "pay_" + p.Reference, "reference": p.Reference, "idempotency_key": r.Header.Get("Idempotency-Key"), "status": "succeeded"}
		list = append(list, pay)
		w.WriteHeader(201)
		json.NewEncoder(w).Encode(pay)
	}))
	defer srv.Close()
	c, err := NewClient(Config{BaseURL: srv.URL, Store: keystore.NewMemory(), Profile: profile.Increase, Budget: BudgetConfig{Disabled: true}})
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Do(context.Background(), payment(100, "ord-1"))
	require.NoError(t, err)
	res, err := c.Do(context.Background(), payment(100, "ord-2"))
	if err == nil {
		t.Logf("ord-2 told succeeded with %s (source %s)", res.Body, res.Source)
	}
	require.False(t, err == nil && charges["ord-2"] == 0, "ord-2 reported succeeded, never charged")
}
