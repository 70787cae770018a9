package idem

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/profile"
)

// A Checkout.com-like API (only 2xx kept under a key; a consistent search by reference).
// posts: 1st 503 Retry-After 240 (nothing executed); then each POST charges, the first
// charging one answering 500 (not kept), later ones 201 (kept).
type ckoScript struct {
	mu      sync.Mutex
	kept    map[string][]byte
	charges map[string]int
	posts   int
	failed  bool
	ra      string
}

func (s *ckoScript) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if r.Method == http.MethodGet {
		ref := r.URL.Query().Get("reference")
		data := []any{}
		for i := 0; i < s.charges[ref]; i++ {
			data = append(data, map[string]any{"id": "pay", "reference": ref, "status": "succeeded"})
		}
		json.NewEncoder(w).Encode(map[string]any{"data": data})
		return
	}
	s.posts++
	if s.posts == 1 {
		w.Header().Set("Retry-After", s.ra)
		w.WriteHeader(503)
		return
	}
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
	out, _ := json.Marshal(map[string]any{"id": "pay", "reference": p.Reference, "status": "succeeded"})
	if !s.failed {
		s.failed = true
		w.WriteHeader(500) // charged, answer lost to an error: nothing kept
		return
	}
	s.kept[key] = out
	w.WriteHeader(201)
	w.Write(out)
}

// crashAt is a transport that "crashes the process" (panics) when the 2nd POST is about to
// leave, keeping that request as if it were on its way through the network; the request is
// delivered when the next POST goes out, if that is within its landing window.
type crashAt struct {
	clock    *fakeClock
	mu       sync.Mutex
	posts    int
	held     *http.Request
	heldBody []byte
	heldAt   time.Time
}

func (c *crashAt) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPost {
		return http.DefaultTransport.RoundTrip(r)
	}
	c.mu.Lock()
	c.posts++
	n := c.posts
	if n == 2 {
		c.heldBody, _ = io.ReadAll(r.Body)
		c.held, c.heldAt = r.Clone(context.Background()), c.clock.Now()
		c.mu.Unlock()
		panic("process crashed with the request on the wire")
	}
	held, body, at := c.held, c.heldBody, c.heldAt
	c.mu.Unlock()
	resp, err := http.DefaultTransport.RoundTrip(r)
	if held != nil && c.clock.Now().Before(at.Add(profile.DefaultLanding)) {
		held.Body, held.RequestURI = io.NopCloser(bytes.NewReader(body)), ""
		if late, lerr := http.DefaultTransport.RoundTrip(held); lerr == nil {
			late.Body.Close()
		}
	}
	return resp, err
}

func TestDialectAdversarialCheckoutResumedLandingBoundHoldsUnderCallPolicy(t *testing.T) {
	advResumed(t, "240", CallMaxRetryAfter(5*time.Minute), CallMaxElapsed(10*time.Minute))
}

// Control: the same crash after a Retry-After within the client's own policy holds.
func TestDialectAdversarialCheckoutResumedLandingBoundControl(t *testing.T) { advResumed(t, "20") }

func advResumed(t *testing.T, ra string, opts ...CallOption) {
	clock := newFakeClock()
	s := &ckoScript{kept: map[string][]byte{}, charges: map[string]int{}, ra: ra}
	srv := httptest.NewServer(s)
	defer srv.Close()
	store := keystore.NewMemory()
	tr := &crashAt{clock: clock}
	cfg := Config{BaseURL: srv.URL, Store: store, Profile: profile.Checkout, Now: clock.Now, Sleep: clock.Sleep,
		HTTPClient: &http.Client{Transport: tr}, Budget: BudgetConfig{Disabled: true}}
	c1, err := NewClient(cfg)
	require.NoError(t, err)
	defer c1.Close() // after the oracle: the first process "crashed", its client is only tidied up
	func() {
		defer func() { t.Logf("first process: %v", recover()) }()
		_, _ = c1.Do(context.Background(), payment(100, "ord-1"), opts...)
	}()
	// The process is gone; its successor recovers the pending record right away.
	cfg.Fleet.Owner = "second"
	c2, err := NewClient(cfg)
	require.NoError(t, err)
	defer c2.Close()
	_, err = c2.Recover(context.Background(), func(r Reconciled) { t.Logf("recovered: %v", r.Err) })
	t.Logf("Recover: %v", err)
	require.LessOrEqual(t, s.charges["ord-1"], 1, "ord-1 charged %d times", s.charges["ord-1"])
	_ = strings.TrimSpace
}
