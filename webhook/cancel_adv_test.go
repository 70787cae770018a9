package webhook

import (
	"context"
	"encoding/json"
	"fmt"
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

// advLedger: POST /v1/payments charges its reference then answers Adyen's stored 500;
// POST /v1/cancels voids every live charge of the reference, and then either answers 200 or,
// when hang is set, never answers (the client's attempt timeout ends it: the answer is lost,
// the cancel landed).
type advLedger struct {
	mu      sync.Mutex
	charges map[string]int
	hang    atomic.Bool
	cancels atomic.Int32
	okPay   atomic.Bool   // payments answer 201 (a healthy charge)
	late    chan struct{} // when set, a cancel takes effect only once it is closed (slow on the network)
}

func (l *advLedger) live(ref string) int { l.mu.Lock(); defer l.mu.Unlock(); return l.charges[ref] }

func (l *advLedger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
		if l.okPay.Load() {
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"pspReference":"psp-new"}`))
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
	case "/v1/cancels":
		l.cancels.Add(1)
		if l.late != nil {
			<-l.late
		}
		l.mu.Lock()
		l.charges[body.PaymentReference] = 0
		l.mu.Unlock()
		if l.hang.Load() {
			<-r.Context().Done() // the cancel took effect; its answer never comes
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"status":"received"}`))
	}
}

func advClient(t *testing.T, url string, store keystore.Store, clk *clock, owner string) *idem.Client {
	t.Helper()
	c, err := idem.NewClient(idem.Config{BaseURL: url, Store: store, Profile: syncAdyen, Now: clk.Now, Fleet: idem.FleetConfig{Owner: owner},
		Policy: idem.Policy{MaxAttempts: 1, AttemptTimeout: 300 * time.Millisecond}, Budget: idem.BudgetConfig{Disabled: true}})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// A worker's cancel by reference takes effect at Adyen, but its answer is lost (timeout):
// the record stays manual with the worker's claim. Adyen redelivers intent #0's
// AUTHORISATION event (the handler answered 409 meanwhile, asking for that). Once the
// claim's landing has passed, the event settles the record as executed: the order is
// reported paid, and the ledger holds no live charge for it.
func TestAdvCancelAnswerLostThenAuthorisationEventReportsAVoidedChargeAsPaid(t *testing.T) {
	l := &advLedger{charges: map[string]int{}}
	api := httptest.NewServer(l)
	defer api.Close()
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	store := keystore.NewMemory()
	worker := advClient(t, api.URL, store, clk, "worker")
	hook := advClient(t, api.URL, store, clk, "hook")
	ctx := context.Background()
	body := []byte(`{"amount":100,"reference":"ord-1"}`)
	op := func() *idem.Operation {
		return idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent("ord-1#0"))
	}

	_, err := worker.Do(ctx, op())
	require.ErrorIs(t, err, idem.ErrStoredServerError)
	require.Equal(t, 1, l.live("ord-1"), "intent #0 charged, then Adyen's 500")

	clk.Add(2 * time.Minute)
	l.hang.Store(true)
	_, err = worker.Do(ctx, op()) // the cancel voids the charge; its answer is lost
	require.ErrorIs(t, err, idem.ErrStoredServerError)
	require.EqualValues(t, 1, l.cancels.Load())
	require.Equal(t, 0, l.live("ord-1"), "the cancel took effect")

	event := Event{Reference: "ord-1", Verdict: idem.VerdictExecuted,
		Response: &keystore.Response{StatusCode: 200, Body: []byte(`{"pspReference":"psp-of-intent-0"}`)}}
	_, err = Settle(ctx, hook, event)
	require.ErrorIs(t, err, idem.ErrCancelInFlight, "held while the cancel may land")

	clk.Add(2 * time.Minute) // the claim ended and its landing passed; no Do or Recover ran yet
	_, err = Settle(ctx, hook, event)
	t.Logf("redelivered AUTHORISATION event: %v", err)

	clk.Add(2 * time.Minute) // the next cancel waits out this one's landing too
	l.hang.Store(false)
	res, err := worker.Do(ctx, op())
	if err == nil {
		require.Failf(t, "order reported paid with its charge voided",
			"intent #0 returned %d %s; live charges of ord-1: %d", res.StatusCode, res.Body, l.live("ord-1"))
	}
	require.ErrorIs(t, err, idem.ErrNotExecuted)
}

// The same through a person (idemctl resolve uses Client.Resolve over the store without a
// profile): the claimant died after its cancel landed.
func TestAdvDeadClaimantsCancelLandedThenExecutedVerdict(t *testing.T) {
	l := &advLedger{charges: map[string]int{}}
	api := httptest.NewServer(l)
	defer api.Close()
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	store := keystore.NewMemory()
	worker := advClient(t, api.URL, store, clk, "worker")
	ctx := context.Background()
	body := []byte(`{"amount":100,"reference":"ord-2"}`)
	_, err := worker.Do(ctx, idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent("ord-2#0")))
	require.ErrorIs(t, err, idem.ErrStoredServerError)
	rec, err := store.GetByIntent(ctx, "", "ord-2#0")
	require.NoError(t, err)

	// Another instance claims, sends its cancel (it lands), and dies before its verdict.
	clk.Add(2 * time.Minute)
	_, err = store.ClaimManual(ctx, "", rec.Key, keystore.Lease{Owner: "dead/cancel", Now: clk.Now(), Until: clk.Now().Add(11 * time.Second)})
	require.NoError(t, err)
	l.mu.Lock()
	l.charges["ord-2"] = 0
	l.mu.Unlock()

	clk.Add(2 * time.Minute)
	op, err := idem.NewClient(idem.Config{Store: store, Now: clk.Now}) // as idemctl resolve builds it
	require.NoError(t, err)
	defer op.Close()
	got, err := op.Resolve(ctx, "", rec.Key, idem.Resolution{Verdict: idem.VerdictExecuted, Note: "AUTHORISATION seen in the customer area"})
	if err == nil {
		require.Failf(t, "order reported paid with its charge voided", "record %s (%s); live charges of ord-2: %d",
			got.State, got.Reason, l.live("ord-2"))
	}
}

// A profile whose cancel may land later than a minute (Route.Landing 10 min) on the workers;
// an operator's client (idemctl resolve: no profile) or a webhook tier with the stock Adyen
// profile judges the worker's claim with DefaultLanding. The worker's cancel, answered by
// nothing, is still on its way three minutes after its claim; the operator's "not executed"
// is taken, the application pays intent #1, and the cancel lands on it.
func TestAdvLandingOfTheCancelIsNotOnTheRecord(t *testing.T) {
	l := &advLedger{charges: map[string]int{}, late: make(chan struct{})}
	api := httptest.NewServer(l)
	defer api.Close()
	land := sync.OnceFunc(func() { close(l.late) })
	defer land()
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	store := keystore.NewMemory()
	slow := syncAdyen.Clone()
	for i := range slow.Settle {
		if slow.Settle[i].Kind == profile.CancelByReference {
			slow.Settle[i].Landing = 10 * time.Minute
		}
	}
	worker, err := idem.NewClient(idem.Config{BaseURL: api.URL, Store: store, Profile: slow, Now: clk.Now, Fleet: idem.FleetConfig{Owner: "worker"},
		Policy: idem.Policy{MaxAttempts: 1, AttemptTimeout: 300 * time.Millisecond}, Budget: idem.BudgetConfig{Disabled: true}})
	require.NoError(t, err)
	defer worker.Close()
	ctx := context.Background()
	body := []byte(`{"amount":100,"reference":"ord-3"}`)
	op := func(intent string) *idem.Operation {
		return idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent(intent))
	}
	_, err = worker.Do(ctx, op("ord-3#0"))
	require.ErrorIs(t, err, idem.ErrStoredServerError)
	rec, err := store.GetByIntent(ctx, "", "ord-3#0")
	require.NoError(t, err)

	clk.Add(11 * time.Minute)
	_, err = worker.Do(ctx, op("ord-3#0")) // the cancel goes; its answer never comes
	require.ErrorIs(t, err, idem.ErrStoredServerError)
	require.EqualValues(t, 1, l.cancels.Load())

	clk.Add(3 * time.Minute) // within the worker's 10-minute landing of its cancel
	_, err = worker.Resolve(ctx, "", rec.Key, idem.Resolution{Verdict: idem.VerdictNotExecuted})
	require.ErrorIs(t, err, idem.ErrCancelInFlight, "the worker itself holds it")
	operator, err := idem.NewClient(idem.Config{Store: store, Now: clk.Now}) // idemctl resolve
	require.NoError(t, err)
	defer operator.Close()
	_, err = operator.Resolve(ctx, "", rec.Key, idem.Resolution{Verdict: idem.VerdictNotExecuted, Note: "no charge in the customer area"})
	if err != nil {
		require.ErrorIs(t, err, idem.ErrCancelInFlight)
		return
	}
	_, err = worker.Do(ctx, op("ord-3#0"))
	require.ErrorIs(t, err, idem.ErrNotExecuted)
	l.okPay.Store(true)
	res, err := worker.Do(ctx, op("ord-3#1")) // the application pays again
	require.NoError(t, err)
	land() // the cancel lands
	require.Eventually(t, func() bool { return l.live("ord-3") == 0 }, 5*time.Second, 5*time.Millisecond)
	require.Failf(t, "intent #1 recorded paid, its charge voided by intent #0's cancel",
		"intent #1 answered %d; live charges of ord-3: %d", res.StatusCode, l.live("ord-3"))
}

// The application wraps Adyen's cancel in its own Config.Lookup (to log it, or to send the
// merchant account), through LookupRequest.Post as documented ("for a settling route that
// acts, such as a cancel by reference"). The profile's cancel is then not the Lookup, so the
// client neither claims the record nor waits for a landing: an AUTHORISATION event is
// accepted while the cancel is on its way, and the cancel voids the payment reported paid.
func TestAdvOwnCancelLookupIsNeverClaimed(t *testing.T) {
	l := &advLedger{charges: map[string]int{}, late: make(chan struct{})}
	api := httptest.NewServer(l)
	defer api.Close()
	land := sync.OnceFunc(func() { close(l.late) })
	defer land()
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	store := keystore.NewMemory()
	cancel := func(ctx context.Context, req idem.LookupRequest) (idem.Resolution, error) {
		var b struct {
			Reference string `json:"reference"`
		}
		if err := json.Unmarshal(req.Record.Request.Body, &b); err != nil {
			return idem.Resolution{}, err
		}
		q, _ := json.Marshal(map[string]string{"paymentReference": b.Reference, "merchantAccount": "acme"})
		status, _, err := req.Post(ctx, "/v1/cancels", q)
		if err != nil || status/100 != 2 {
			return idem.Resolution{}, fmt.Errorf("cancel: %d %v", status, err)
		}
		return idem.Resolution{Verdict: idem.VerdictNotExecuted, Note: "canceled"}, nil
	}
	worker, err := idem.NewClient(idem.Config{BaseURL: api.URL, Store: store, Profile: syncAdyen, Now: clk.Now, Fleet: idem.FleetConfig{Owner: "worker"},
		Lookup: cancel, Policy: idem.Policy{MaxAttempts: 1, AttemptTimeout: 5 * time.Second}, Budget: idem.BudgetConfig{Disabled: true}})
	require.NoError(t, err)
	defer worker.Close()
	hook := advClient(t, api.URL, store, clk, "hook")
	ctx := context.Background()
	body := []byte(`{"amount":100,"reference":"ord-4"}`)

	// The caller's Lookup next to the profile's cancel route acts like it: not asked at once.
	_, err = worker.Do(ctx, idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent("ord-4#0")))
	require.ErrorIs(t, err, idem.ErrStoredServerError)
	require.Zero(t, l.cancels.Load(), "no cancel before the landing")
	clk.Add(2 * time.Minute)
	done := make(chan error, 1)
	go func() {
		_, err := worker.Do(ctx, idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent("ord-4#0")))
		done <- err
	}()
	require.Eventually(t, func() bool { return l.cancels.Load() == 1 }, 5*time.Second, time.Millisecond,
		"the cancel goes after the landing")
	_, err = Settle(ctx, hook, Event{Reference: "ord-4", Verdict: idem.VerdictExecuted,
		Response: &keystore.Response{StatusCode: 200, Body: []byte(`{"pspReference":"psp-4"}`)}})
	t.Logf("AUTHORISATION event during the cancel: %v", err)
	land()
	werr := <-done
	rec, gerr := store.GetByIntent(ctx, "", "ord-4#0")
	require.NoError(t, gerr)
	if rec.State == keystore.StateSucceeded {
		require.Failf(t, "order reported paid with its charge voided", "worker's Do: %v; record %s; live charges of ord-4: %d",
			werr, rec.State, l.live("ord-4"))
	}
}

// Adyen's POST /cancels by merchant reference answers 201 {"status":"received"} before it
// acts: "You get the outcome of the request asynchronously, in a TECHNICAL_CANCEL webhook"
// (Adyen API explorer, Checkout /cancels). The shipped profile marks the route Async: the 201
// leaves the record manual, waiting for that event, and sends no second cancel; the event
// settles it once the cancel can no longer land, and only then may the application pay again.
func TestAsyncCancelWaitsForItsEvent(t *testing.T) {
	l := &advLedger{charges: map[string]int{}}
	var queued []string // cancels received, not yet processed
	var qmu sync.Mutex
	mux := http.NewServeMux()
	mux.Handle("/v1/payments", l)
	mux.HandleFunc("/v1/cancels", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			PaymentReference string `json:"paymentReference"`
		}
		_ = json.NewDecoder(r.Body).Decode(&b)
		l.cancels.Add(1)
		qmu.Lock()
		queued = append(queued, b.PaymentReference)
		qmu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"status":"received","paymentReference":"` + b.PaymentReference + `"}`))
	})
	api := httptest.NewServer(mux)
	defer api.Close()
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	store := keystore.NewMemory()
	worker := asyncClient(t, api.URL, store, clk, "worker")
	hook := asyncClient(t, api.URL, store, clk, "hook")
	ctx := context.Background()
	body := []byte(`{"amount":100,"reference":"ord-5"}`)
	op := func(intent string) *idem.Operation {
		return idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent(intent))
	}
	_, err := worker.Do(ctx, op("ord-5#0"))
	require.ErrorIs(t, err, idem.ErrStoredServerError)
	clk.Add(2 * time.Minute)
	_, err = worker.Do(ctx, op("ord-5#0"))
	require.ErrorIs(t, err, idem.ErrStoredServerError, "the 201 'received' settles nothing")
	require.EqualValues(t, 1, l.cancels.Load())
	rec, err := store.GetByIntent(ctx, "", "ord-5#0")
	require.NoError(t, err)
	require.Equal(t, keystore.StateManual, rec.State)
	require.Equal(t, "cancel_requested", rec.Reason)

	clk.Add(10 * time.Minute)
	_, err = worker.Do(ctx, op("ord-5#0"))
	require.ErrorIs(t, err, idem.ErrStoredServerError)
	rep, err := worker.Recover(ctx, nil)
	require.NoError(t, err)
	require.Zero(t, rep.Resolved)
	require.EqualValues(t, 1, l.cancels.Load(), "no second cancel while the first one's event is awaited")

	qmu.Lock()
	for _, ref := range queued { // Adyen processes its queue, then sends TECHNICAL_CANCEL success=true
		l.mu.Lock()
		l.charges[ref] = 0
		l.mu.Unlock()
	}
	queued = nil
	qmu.Unlock()
	_, err = Settle(ctx, hook, Event{Key: rec.Key, Verdict: idem.VerdictNotExecuted, Note: "TECHNICAL_CANCEL success=true"})
	require.NoError(t, err)
	_, err = worker.Do(ctx, op("ord-5#0"))
	require.ErrorIs(t, err, idem.ErrNotExecuted)

	l.okPay.Store(true)
	_, err = worker.Do(ctx, op("ord-5#1")) // the application pays again
	require.NoError(t, err)
	require.Equal(t, 1, l.live("ord-5"))
}

// The same 201 "received" for a payment that was captured at once (Adyen's immediate
// capture): /cancels only cancels "a payment that has not yet been captured", so Adyen's
// TECHNICAL_CANCEL reports success=false and intent #0's charge stands. The record waits for
// that event; a stale AUTHORISATION event is refused meanwhile (the cancel may have voided
// the charge), the cancel's refusal settles it as executed, and nothing is paid twice.
func TestAsyncCancelRefusedSettlesExecuted(t *testing.T) {
	l := &advLedger{charges: map[string]int{}}
	mux := http.NewServeMux()
	mux.Handle("/v1/payments", l)
	mux.HandleFunc("/v1/cancels", func(w http.ResponseWriter, r *http.Request) {
		l.cancels.Add(1) // received; refused later (captured): nothing is voided
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"status":"received"}`))
	})
	api := httptest.NewServer(mux)
	defer api.Close()
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	store := keystore.NewMemory()
	worker := asyncClient(t, api.URL, store, clk, "worker")
	hook := asyncClient(t, api.URL, store, clk, "hook")
	ctx := context.Background()
	body := []byte(`{"amount":100,"reference":"ord-6"}`)
	op := func(intent string) *idem.Operation {
		return idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent(intent))
	}
	_, err := worker.Do(ctx, op("ord-6#0"))
	require.ErrorIs(t, err, idem.ErrStoredServerError)
	require.Equal(t, 1, l.live("ord-6"))
	clk.Add(2 * time.Minute)
	_, err = worker.Do(ctx, op("ord-6#0"))
	require.ErrorIs(t, err, idem.ErrStoredServerError)
	rec, err := store.GetByIntent(ctx, "", "ord-6#0")
	require.NoError(t, err)

	clk.Add(10 * time.Minute)
	paid := &keystore.Response{StatusCode: 200, Body: []byte(`{"pspReference":"psp-6"}`)}
	_, err = Settle(ctx, hook, Event{Reference: "ord-6", Verdict: idem.VerdictExecuted, Response: paid, Note: "AUTHORISATION"})
	require.ErrorIs(t, err, idem.ErrCancelInFlight, "an AUTHORISATION event says nothing of the cancel")
	_, err = Settle(ctx, hook, Event{Key: rec.Key, Verdict: idem.VerdictExecuted, Response: paid,
		CancelRefused: true, Note: "TECHNICAL_CANCEL success=false"})
	require.NoError(t, err)
	res, err := worker.Do(ctx, op("ord-6#0"))
	require.NoError(t, err, "the charge stands: the order is paid")
	require.Equal(t, `{"pspReference":"psp-6"}`, string(res.Body))
	require.Equal(t, 1, l.live("ord-6"))
	require.EqualValues(t, 1, l.cancels.Load())
}

func asyncClient(t *testing.T, url string, store keystore.Store, clk *clock, owner string) *idem.Client {
	t.Helper()
	c, err := idem.NewClient(idem.Config{BaseURL: url, Store: store, Profile: profile.Adyen, Now: clk.Now, Fleet: idem.FleetConfig{Owner: owner},
		Policy: idem.Policy{MaxAttempts: 1, AttemptTimeout: 300 * time.Millisecond}, Budget: idem.BudgetConfig{Disabled: true}})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}
