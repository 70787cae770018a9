package webhook

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/profile"
)

// adyenLedger is an Adyen-like API: every POST /v1/payments charges its reference and
// answers 500 without Transient-Error (Adyen's "do not retry": a stored error) when
// fail500 says so; POST /v1/cancels cancels every charge of the reference.
type adyenLedger struct {
	mu          sync.Mutex
	charges     map[string]int // reference -> live charges
	chargeFirst atomic.Bool    // the 500 follows a charge
	cancelGate  chan struct{}  // when set, a cancel waits for it (a slow cancel in flight)
	cancelSeen  chan struct{}
}

func (l *adyenLedger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Reference        string `json:"reference"`
		PaymentReference string `json:"paymentReference"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	switch r.URL.Path {
	case "/v1/payments":
		if l.chargeFirst.Load() {
			l.mu.Lock()
			l.charges[body.Reference]++
			l.mu.Unlock()
		}
		w.WriteHeader(http.StatusInternalServerError) // no Transient-Error: stored error
	case "/v1/cancels":
		if l.cancelSeen != nil {
			close(l.cancelSeen)
		}
		if l.cancelGate != nil {
			<-l.cancelGate
		}
		l.mu.Lock()
		l.charges[body.PaymentReference] = 0
		l.mu.Unlock()
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"status":"received"}`))
	}
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func adyenClient(t *testing.T, url string, store keystore.Store, clk *clock) *idem.Client {
	t.Helper()
	c, err := idem.NewClient(idem.Config{BaseURL: url, Store: store, Profile: syncAdyen, Now: clk.Now,
		Policy: idem.Policy{MaxAttempts: 1}, Budget: idem.BudgetConfig{Disabled: true}})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// A late AUTHORISATION event of an earlier intent of the order, whose charge Adyen's cancel
// voided, settles the order's next intent as executed by reference: the application is
// told the order is paid, and nothing is charged.
func TestDialectAdversarial2LateEventByReferenceNeverSettlesTheNextIntent(t *testing.T) {
	l := &adyenLedger{charges: map[string]int{}}
	api := httptest.NewServer(l)
	defer api.Close()
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	store := keystore.NewMemory()
	c := adyenClient(t, api.URL, store, clk)
	ctx := context.Background()
	body := []byte(`{"amount":100,"reference":"ord-1"}`)

	// Intent #0: charged, then Adyen's 500: manual; the cancel waits out the landing.
	l.chargeFirst.Store(true)
	_, err := c.Do(ctx, idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent("ord-1#0")))
	require.ErrorIs(t, err, idem.ErrStoredServerError)
	clk.Add(2 * time.Minute)
	_, err = c.Do(ctx, idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent("ord-1#0")))
	require.ErrorIs(t, err, idem.ErrNotExecuted, "the cancel voided intent #0's charge")
	require.Equal(t, 0, l.charges["ord-1"])

	// Intent #1 (the application's one permitted new try): Adyen's 500 before any charge.
	l.chargeFirst.Store(false)
	_, err = c.Do(ctx, idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent("ord-1#1")))
	require.ErrorIs(t, err, idem.ErrStoredServerError)

	// Intent #0's AUTHORISATION event (success=true), delivered late (Adyen retries events).
	_, err = Settle(ctx, c, Event{Reference: "ord-1", Verdict: idem.VerdictExecuted,
		Response: &keystore.Response{StatusCode: 200, Body: []byte(`{"pspReference":"psp-of-intent-0"}`)}})
	t.Logf("late event: %v", err)

	res, err := c.Do(ctx, idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent("ord-1#1")))
	if err == nil {
		require.Failf(t, "acknowledged without a charge", "intent #1 returned %d %s; live charges of ord-1: %d",
			res.StatusCode, res.Body, l.charges["ord-1"])
	}
}

// A cancel in flight (a worker's Do) and an "executed" event (the webhook tier, another
// instance) on one manual record: the worker claimed the record before it sent the cancel,
// so the event is refused (ErrCancelInFlight: the handler answers 409 and the provider
// delivers it again), the cancel settles the record not executed, and the redelivered event
// finds the verdict standing. Nobody is told the order is paid while its charge is voided.
func TestCancelInFlightHoldsAnExecutedEvent(t *testing.T) {
	l := &adyenLedger{charges: map[string]int{}, cancelGate: make(chan struct{}), cancelSeen: make(chan struct{})}
	api := httptest.NewServer(l)
	defer api.Close()
	openGate := sync.OnceFunc(func() { close(l.cancelGate) })
	defer openGate() // before api.Close, which waits for the cancel's handler
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	store := keystore.NewMemory()
	worker := adyenClient(t, api.URL, store, clk)
	hook := adyenClient(t, api.URL, store, clk)
	ctx := context.Background()
	body := []byte(`{"amount":100,"reference":"ord-1"}`)

	l.chargeFirst.Store(true)
	_, err := worker.Do(ctx, idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent("ord-1#0")))
	require.ErrorIs(t, err, idem.ErrStoredServerError)
	clk.Add(2 * time.Minute)

	type out struct {
		res *idem.Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := worker.Do(ctx, idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent("ord-1#0")))
		done <- out{res, err}
	}()
	<-l.cancelSeen // the cancel is on its way
	event := Event{Reference: "ord-1", Verdict: idem.VerdictExecuted,
		Response: &keystore.Response{StatusCode: 200, Body: []byte(`{"pspReference":"psp-1"}`)}}
	_, err = Settle(ctx, hook, event)
	require.ErrorIs(t, err, idem.ErrCancelInFlight, "no verdict while the cancel may land")
	rec, err := store.GetByIntent(ctx, "", "ord-1#0")
	require.NoError(t, err)
	require.Equal(t, keystore.StateManual, rec.State, "the refused event wrote nothing")

	openGate() // the cancel lands: the charge is voided
	o := <-done
	require.ErrorIs(t, o.err, idem.ErrNotExecuted, "the cancel's own verdict")
	require.Equal(t, 0, l.charges["ord-1"])

	_, err = Settle(ctx, hook, event) // redelivered: the cancel's verdict stands
	require.ErrorIs(t, err, idem.ErrNotManual)
	rec, err = store.GetByIntent(ctx, "", "ord-1#0")
	require.NoError(t, err)
	require.Equal(t, keystore.StateFailed, rec.State)
}

// Two instances reconcile one manual record with Adyen's cancel. The second instance's cancel
// is slow on the network; the first instance finds the record claimed for it and sends no
// cancel of its own, nor gives a verdict, so the application cannot pay the order again
// while that cancel may still land. Once it has landed and settled the record, the order is
// paid under its next intent, and that charge stands.
func TestSecondInstancesCancelKeepsTheRecordUntilItLands(t *testing.T) {
	l := &adyenLedger{charges: map[string]int{}}
	var cancels atomic.Int32
	slow := make(chan struct{})
	slowSeen := make(chan struct{})
	var okB atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/payments", func(w http.ResponseWriter, r *http.Request) {
		if okB.Load() { // intent #1 succeeds
			l.mu.Lock()
			l.charges["ord-1"]++
			l.mu.Unlock()
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"pspReference":"psp-B"}`))
			return
		}
		l.ServeHTTP(w, r)
	})
	mux.HandleFunc("/v1/cancels", func(w http.ResponseWriter, r *http.Request) {
		if cancels.Add(1) == 1 { // instance 2's cancel is slow on the network
			close(slowSeen)
			<-slow
		}
		l.ServeHTTP(w, r)
	})
	api := httptest.NewServer(mux)
	defer api.Close()
	land := sync.OnceFunc(func() { close(slow) })
	defer land() // before api.Close, which waits for the cancel's handler
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	store := keystore.NewMemory()
	inst1 := adyenClient(t, api.URL, store, clk)
	inst2 := adyenClient(t, api.URL, store, clk)
	ctx := context.Background()
	body := []byte(`{"amount":100,"reference":"ord-1"}`)

	l.chargeFirst.Store(false) // Adyen's 500 before any charge
	_, err := inst1.Do(ctx, idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent("ord-1#0")))
	require.ErrorIs(t, err, idem.ErrStoredServerError)
	clk.Add(2 * time.Minute)

	rec2 := make(chan idem.RecoverReport, 1)
	go func() { rep, _ := inst2.Recover(ctx, nil); rec2 <- rep }()
	<-slowSeen // instance 2's cancel is on its way
	_, err = inst1.Do(ctx, idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent("ord-1#0")))
	require.ErrorIs(t, err, idem.ErrStoredServerError, "still unknown: instance 2's cancel may land")
	require.NotErrorIs(t, err, idem.ErrNotExecuted)
	require.EqualValues(t, 1, cancels.Load(), "instance 1 sent no cancel of its own")

	land() // instance 2's cancel lands and settles the record
	require.Equal(t, 1, (<-rec2).Resolved)
	_, err = inst1.Do(ctx, idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent("ord-1#0")))
	require.ErrorIs(t, err, idem.ErrNotExecuted)

	okB.Store(true) // the application pays under the next intent
	res, err := inst1.Do(ctx, idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent("ord-1#1")))
	require.NoError(t, err)
	require.Equal(t, 1, l.charges["ord-1"], "no cancel voids the new charge")
	rec, err := store.Get(ctx, "", res.Key)
	require.NoError(t, err)
	require.Equal(t, keystore.StateSucceeded, rec.State)
	require.EqualValues(t, 1, cancels.Load())
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
