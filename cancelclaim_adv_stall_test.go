package idem

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
)

// hookStore is Memory (every capability promoted) whose Get runs after once: the caller then
// holds a copy read before whatever after did (a pause between the read and the next step).
type hookStore struct {
	*keystore.Memory
	after atomic.Pointer[func(rec *keystore.Record)]
}

func (s *hookStore) Get(ctx context.Context, scope, key string) (*keystore.Record, error) {
	rec, err := s.Memory.Get(ctx, scope, key)
	if f := s.after.Swap(nil); f != nil && err == nil {
		(*f)(rec)
	}
	return rec, err
}

type advLedger struct {
	mu      sync.Mutex
	charges map[string]int
	okPay   atomic.Bool
	cancels atomic.Int32
}

func (l *advLedger) live(ref string) int { l.mu.Lock(); defer l.mu.Unlock(); return l.charges[ref] }
func (l *advLedger) void(ref string)     { l.mu.Lock(); l.charges[ref] = 0; l.mu.Unlock() }

func (l *advLedger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/payments":
		l.mu.Lock()
		l.charges["ord-x"]++
		l.mu.Unlock()
		if l.okPay.Load() {
			w.WriteHeader(http.StatusCreated)
			return
		}
		w.WriteHeader(http.StatusInternalServerError) // Adyen's stored 500
	case "/v1/cancels":
		l.cancels.Add(1)
		l.void("ord-x")
		w.WriteHeader(http.StatusOK)
	}
}

func advSetup(t *testing.T) (*advLedger, *hookStore, *testClock, func(owner string) *Client) {
	l := &advLedger{charges: map[string]int{}}
	api := httptest.NewServer(l)
	t.Cleanup(api.Close)
	store := &hookStore{Memory: keystore.NewMemory()}
	clk := &testClock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	mk := func(owner string) *Client {
		c, err := NewClient(Config{BaseURL: api.URL, Store: store, Profile: syncAdyen, Now: clk.Now, Fleet: FleetConfig{Owner: owner},
			Policy: Policy{MaxAttempts: 1}, Budget: BudgetConfig{Disabled: true}})
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	return l, store, clk, mk
}

type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

var advBody = []byte(`{"amount":100,"reference":"ord-x"}`)

func advOp(intent string) *Operation {
	return NewOperation(http.MethodPost, "/v1/payments", advBody, WithIntent(intent))
}

// Instance A reads the manual record (no claim on it) and pauses for longer than a cancel's
// claim lasts. Meanwhile instance B claims it and sends its cancel, whose answer never comes
// (still on the network). A resumes: its "is it too soon" check runs on the copy it read,
// its claim succeeds (B's lease has ended), its cancel is answered, and it settles "not
// executed" at once, while B's cancel may land for a minute yet. The application pays
// intent #1, and B's cancel lands on it.
func TestAdvPauseBetweenReadAndClaimSkipsTheEarlierCancelsLanding(t *testing.T) {
	l, store, clk, mk := advSetup(t)
	a := mk("inst-a")
	ctx := context.Background()
	_, err := a.Do(ctx, advOp("ord-x#0"))
	require.ErrorIs(t, err, ErrStoredServerError)
	clk.Add(2 * time.Minute)

	bInFlight := false
	after := func(rec *keystore.Record) {
		if rec.State != keystore.StateManual {
			return
		}
		_, err := store.ClaimManual(ctx, rec.Scope, rec.Key, keystore.Lease{Owner: "inst-b" + cancelOwnerSuffix, Now: clk.Now(), Until: clk.Now().Add(11 * time.Second)})
		require.NoError(t, err)
		bInFlight = true          // B's cancel is sent; its answer is lost
		clk.Add(12 * time.Second) // A's pause: B's claim has ended, its cancel may still land
	}
	store.after.Store(&after)
	rep, err := a.Recover(ctx, nil)
	require.NoError(t, err)
	require.True(t, bInFlight)
	t.Logf("A's Recover: resolved %d, cancels sent by A: %d", rep.Resolved, l.cancels.Load())
	_, err = a.Do(ctx, advOp("ord-x#0"))
	if !assertNotExecuted(err) {
		return // held: A waited for B's cancel
	}
	l.okPay.Store(true)
	_, err = a.Do(ctx, advOp("ord-x#1")) // the application pays again
	require.NoError(t, err)
	require.Equal(t, 1, l.live("ord-x"))
	l.void("ord-x") // B's cancel lands, within its landing
	require.Failf(t, "intent #1 recorded paid, voided by intent #0's earlier cancel",
		"live charges of ord-x: %d", l.live("ord-x"))
}

func assertNotExecuted(err error) bool { return err != nil && errors.Is(err, ErrNotExecuted) }

// A person's Resolve re-reads the record, and instance B claims it for a cancel before the
// verdict is written: the write carries the old Fence, is refused, and Resolve reports the
// cancel in flight. (Held.)
func TestAdvResolveBetweenReReadAndWriteIsFenced(t *testing.T) {
	_, store, clk, mk := advSetup(t)
	a := mk("inst-a")
	ctx := context.Background()
	_, err := a.Do(ctx, advOp("ord-x#0"))
	require.ErrorIs(t, err, ErrStoredServerError)
	rec, err := store.GetByIntent(ctx, "", "ord-x#0")
	require.NoError(t, err)
	clk.Add(2 * time.Minute)
	for _, v := range []Verdict{VerdictExecuted, VerdictNotExecuted} {
		gets := 0
		after := func(r *keystore.Record) {}
		after = func(r *keystore.Record) {
			if gets++; gets < 2 { // Resolve's first read; arm again for settle's re-read
				store.after.Store(&after)
				return
			}
			_, err := store.ClaimManual(ctx, r.Scope, r.Key, keystore.Lease{Owner: "inst-b" + cancelOwnerSuffix, Now: clk.Now(), Until: clk.Now().Add(11 * time.Second)})
			require.NoError(t, err)
		}
		store.after.Store(&after)
		_, err = a.Resolve(ctx, "", rec.Key, Resolution{Verdict: v})
		require.ErrorIs(t, err, ErrCancelInFlight, v.String())
		got, err := store.Get(ctx, "", rec.Key)
		require.NoError(t, err)
		require.Equal(t, keystore.StateManual, got.State)
		clk.Add(2 * time.Minute)
	}
}
