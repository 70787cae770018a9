package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/profile"
)

// skewLedger: payments charge their reference (500 while fail is set, else 201); the first
// cancel waits for gate before it voids the reference's charges (a slow cancel on the
// network), later ones void at once and answer 200.
type skewLedger struct {
	mu      sync.Mutex
	charges map[string]int
	fail    atomic.Bool
	cancels atomic.Int32
	gate    chan struct{}
	seen    chan struct{}
}

func (l *skewLedger) live(ref string) int { l.mu.Lock(); defer l.mu.Unlock(); return l.charges[ref] }

func (l *skewLedger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Reference        string `json:"reference"`
		PaymentReference string `json:"paymentReference"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	switch r.URL.Path {
	case "/v1/payments":
		l.mu.Lock()
		l.charges[body.Reference]++
		l.mu.Unlock()
		if l.fail.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"pspReference":"psp-new"}`))
	case "/v1/cancels":
		if l.cancels.Add(1) == 1 {
			close(l.seen)
			<-l.gate
		}
		l.mu.Lock()
		l.charges[body.PaymentReference] = 0
		l.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}
}

// Instance A's clock is 5 minutes behind PostgreSQL's (and instance B's). Do on A, on a
// manual record, claims it for a cancel without checking its clock against the store's
// (MaxClockSkew, 5 s): the claim's LeaseUntil is already minutes in the past for B. While
// A's cancel is on the network, B claims the record too, cancels, settles "not executed";
// the application pays the order under intent #1, and A's cancel lands and voids it.
func TestAdvSkewedClaimantsCancelVoidsTheNextIntent(t *testing.T) {
	pool := testSchema(t)
	sa := openStore(t, pool(), nil)
	sb := openStore(t, pool(), nil)
	l := &skewLedger{charges: map[string]int{}, gate: make(chan struct{}), seen: make(chan struct{})}
	api := httptest.NewServer(l)
	defer api.Close()
	land := sync.OnceFunc(func() { close(l.gate) })
	defer land()
	ctx := context.Background()
	body := []byte(`{"amount":100,"reference":"ord-s"}`)
	op := func(intent string) *idem.Operation {
		return idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent(intent))
	}
	mk := func(s keystore.Store, owner string, now func() time.Time, skew time.Duration) *idem.Client {
		cfg := idem.Config{BaseURL: api.URL, Store: s, Profile: syncAdyen, Fleet: idem.FleetConfig{Owner: owner, MaxClockSkew: skew}, Now: now, Policy: idem.Policy{MaxAttempts: 1, AttemptTimeout: 5 * time.Second}, Budget: idem.BudgetConfig{Disabled: true}}
		c, err := idem.NewClient(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// The payment's 500 was stored ten minutes ago (written under that clock).
	old := mk(sb, "old", func() time.Time { return time.Now().Add(-10 * time.Minute) }, -1)
	l.fail.Store(true)
	if _, err := old.Do(ctx, op("ord-s#0")); !errors.Is(err, idem.ErrStoredServerError) {
		t.Fatalf("intent #0: %v", err)
	}
	a := mk(sa, "inst-a", func() time.Time { return time.Now().Add(-5 * time.Minute) }, 0) // 5 min behind
	b := mk(sb, "inst-b", time.Now, 0)

	aDone := make(chan error, 1)
	go func() { _, err := a.Do(ctx, op("ord-s#0")); aDone <- err }()
	select {
	case <-l.seen: // A's cancel is on its way
	case err := <-aDone:
		t.Logf("A sent no cancel: %v", err)
		return
	}
	_, err := b.Do(ctx, op("ord-s#0"))
	t.Logf("B on intent #0 while A's cancel is on its way: %v (cancels sent: %d)", err, l.cancels.Load())
	if !errors.Is(err, idem.ErrNotExecuted) {
		return
	}
	l.fail.Store(false)
	res, err := b.Do(ctx, op("ord-s#1"))
	if err != nil {
		t.Fatalf("intent #1: %v", err)
	}
	land() // A's cancel lands
	t.Logf("A: %v", <-aDone)
	if l.live("ord-s") == 0 {
		t.Fatalf("intent #1 answered %d and is recorded paid; live charges of ord-s: %d (A's late cancel voided it)", res.StatusCode, l.live("ord-s"))
	}
}

// Three instances, each with its own pool on one schema, run Recover at once on one manual
// record: one cancel, one verdict. (Held.)
func TestAdvPGRecoverOnThreeInstancesAtOnce(t *testing.T) {
	pool := testSchema(t)
	var cancels atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/cancels" {
			cancels.Add(1)
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer api.Close()
	var clients []*idem.Client
	for i := range 3 {
		c, err := idem.NewClient(idem.Config{BaseURL: api.URL, Store: openStore(t, pool(), nil), Profile: syncAdyen,
			Fleet: idem.FleetConfig{Owner: "i" + string(rune('0'+i))}, Policy: idem.Policy{MaxAttempts: 1}, Budget: idem.BudgetConfig{Disabled: true},
			Now: func() time.Time { return time.Now() }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		clients = append(clients, c)
	}
	ctx := context.Background()
	for round := range 10 {
		intent := "ord-p" + string(rune('a'+round))
		old, err := idem.NewClient(idem.Config{BaseURL: api.URL, Store: openStore(t, pool(), nil), Profile: syncAdyen,
			Fleet: idem.FleetConfig{MaxClockSkew: -1}, Now: func() time.Time { return time.Now().Add(-3 * time.Minute) },
			Policy: idem.Policy{MaxAttempts: 1}, Budget: idem.BudgetConfig{Disabled: true}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := old.Do(ctx, idem.NewOperation(http.MethodPost, "/v1/payments", []byte(`{"reference":"`+intent+`"}`), idem.WithIntent(intent))); !errors.Is(err, idem.ErrStoredServerError) {
			t.Fatal(err)
		}
		old.Close()
		before := cancels.Load()
		var wg sync.WaitGroup
		var resolved atomic.Int32
		for _, c := range clients {
			wg.Go(func() {
				rep, err := c.Recover(ctx, nil)
				if err != nil {
					t.Error(err)
				}
				resolved.Add(int32(rep.Resolved))
			})
		}
		wg.Wait()
		if got := cancels.Load() - before; got != 1 || resolved.Load() != 1 {
			t.Fatalf("round %d: %d cancels, %d verdicts", round, got, resolved.Load())
		}
	}
}

// syncAdyen is Adyen's profile with the simulators' synchronous cancel (docs/DIALECTS.md's
// convention: the 2xx means every charge of the reference is canceled).
var syncAdyen = func() profile.Profile {
	p := profile.Adyen.Clone()
	for i := range p.Settle {
		p.Settle[i].Async = false
	}
	return p
}()
