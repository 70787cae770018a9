package idemtemporal_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtemporal"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore/boltstore"
)

// Kill points: where the first attempt's worker dies.
const (
	killNone        = ""
	killBeforeSend  = "before the send"                          // the record is persisted, no byte has left
	killDuring      = "during the send"                          // the request reached the server, which then executes it
	killBeforeIdem  = "after execution, before idem recorded it" // the answer arrived, idem never saw it
	killBeforeTemp  = "after idem recorded, before Temporal did" // Do returned, the activity never did
	statusPath      = "/v1/payments/operations/{key}"
	paymentsPath    = "/v1/payments"
	errWorkerDiedAt = "worker died"
)

// order is the activity's input: one business payment.
type order struct {
	Reference string `json:"reference"`
	Amount    int    `json:"amount"`
}

// post is one POST as it reached the API.
type post struct {
	key    string
	checks int // status checks the API had answered when the POST arrived
}

// harness is a fault-injecting payments API (idemtest) and a fleet of workers, one alive at a
// time, sharing one keystore file: a worker's death closes its idem client and its keystore,
// as a killed process would, and the activity's next attempt runs on a new worker that opens
// the file again. Temporal's test environment retries the activity as the server would after
// the dead worker's heartbeat timeout.
type harness struct {
	t    *testing.T
	api  *idemtest.Handler
	url  string
	path string // the keystore file

	mu        sync.Mutex
	kill      string // the kill point of the first attempt
	payer     *idemtemporal.Payer
	store     *boltstore.Store
	starts    int // workers started
	attempts  int // activity attempts
	posts     []post
	cancel    context.CancelFunc // kills the running attempt
	killed    bool
	posted    chan struct{} // closed when the first POST's handler has returned
	returned  chan struct{} // closed when the first attempt's Do has returned
	postedOne sync.Once
	steps     []idemtemporal.Step // the step of every attempt
	errs      []error             // what every attempt returned
}

func newHarness(t *testing.T, kill string, cfg idemtest.Config) *harness {
	t.Helper()
	h := &harness{t: t, kill: kill, path: filepath.Join(t.TempDir(), "keys.db"), posted: make(chan struct{}),
		returned: make(chan struct{})}
	cfg.RetryAfter = -1 // "Retry-After: 0": no waiting in tests
	cfg.OnPayment = h.onPayment
	h.api = idemtest.NewHandler(cfg)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The API runs a request that arrived to its end even when the client hangs up,
		// as a payment API does once it has begun: a killed worker's payment is executed.
		h.api.ServeHTTP(w, r.WithContext(context.WithoutCancel(r.Context())))
		if r.Method == http.MethodPost {
			h.postedOne.Do(func() { close(h.posted) })
		}
	}))
	h.url = srv.URL
	t.Cleanup(func() {
		srv.Close()
		h.api.Close()
		h.mu.Lock()
		defer h.mu.Unlock()
		h.stopWorker()
	})
	return h
}

// onPayment runs on the API as a POST arrives. Killing during the send cancels the attempt
// and holds the request until the attempt has returned, so that the answer cannot reach it.
func (h *harness) onPayment(r *http.Request) {
	h.mu.Lock()
	h.posts = append(h.posts, post{key: r.Header.Get("Idempotency-Key"), checks: h.api.KeyStatusChecks()})
	first := len(h.posts) == 1
	kill := first && h.kill == killDuring
	if kill {
		h.killed = true
		h.cancel()
	}
	h.mu.Unlock()
	if kill {
		<-h.returned
	}
}

// RoundTrip is the workers' transport: it kills the attempt before the first POST leaves,
// or after its answer arrived but before idem reads it.
func (h *harness) RoundTrip(r *http.Request) (*http.Response, error) {
	h.mu.Lock()
	first := r.Method == http.MethodPost && len(h.posts) == 0 && !h.killed
	kill := h.kill
	if first && kill == killBeforeSend {
		h.killed = true
		h.cancel()
		h.mu.Unlock()
		return nil, errors.New(errWorkerDiedAt + " " + killBeforeSend)
	}
	h.mu.Unlock()
	resp, err := http.DefaultTransport.RoundTrip(r)
	if first && kill == killBeforeIdem && err == nil {
		h.mu.Lock()
		h.killed = true
		h.cancel()
		h.mu.Unlock()
		resp.Body.Close()
		return nil, errors.New(errWorkerDiedAt + " " + killBeforeIdem)
	}
	return resp, err
}

// worker returns the live worker's Payer, starting a worker (a new idem client on the
// keystore file) when none is alive. h.mu is held.
func (h *harness) worker() *idemtemporal.Payer {
	if h.payer != nil {
		return h.payer
	}
	store, err := boltstore.Open(h.path, &boltstore.Options{Timeout: time.Second})
	require.NoError(h.t, err)
	c, err := idem.NewClient(idem.Config{BaseURL: h.url, KeyStatusURL: statusPath, Store: store,
		HTTPClient: &http.Client{Transport: h},
		Policy: idem.Policy{InitialDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond,
			AttemptTimeout: 5 * time.Second},
		Budget: idem.BudgetConfig{Disabled: true}})
	require.NoError(h.t, err)
	p, err := idemtemporal.New(idemtemporal.Config{Client: c, HeartbeatInterval: -1})
	require.NoError(h.t, err)
	h.payer, h.store = p, store
	h.starts++
	return p
}

// stopWorker ends the live worker: its client and its keystore close. h.mu is held.
func (h *harness) stopWorker() {
	if h.payer == nil {
		return
	}
	require.NoError(h.t, h.payer.Client().Close())
	require.NoError(h.t, h.store.Close())
	h.payer, h.store = nil, nil
}

// Pay is the activity: it pays the order through idem and returns the payment's id.
func (h *harness) Pay(ctx context.Context, o order) (string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h.mu.Lock()
	h.attempts++
	first := h.attempts == 1
	h.cancel = cancel
	p := h.worker()
	h.steps = append(h.steps, p.Step(ctx))
	h.mu.Unlock()

	body := fmt.Sprintf(`{"amount":%d,"currency":"EUR","customer":"cus_1","reference":%q}`, o.Amount, o.Reference)
	res, err := p.Do(ctx, http.MethodPost, paymentsPath, []byte(body), nil)
	if first {
		close(h.returned)
	}
	h.mu.Lock()
	h.errs = append(h.errs, err)
	h.mu.Unlock()

	h.mu.Lock()
	defer h.mu.Unlock()
	if first && (h.killed || h.kill == killBeforeTemp) {
		// The worker dies: whatever Do returned is lost with it. A request the API holds
		// finishes on the API after the death, as it would.
		if h.kill == killDuring {
			h.mu.Unlock()
			<-h.posted
			h.mu.Lock()
		}
		h.stopWorker()
		return "", errors.New(errWorkerDiedAt)
	}
	if err != nil {
		return "", err
	}
	var pay struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(res.Body, &pay); err != nil {
		return "", err
	}
	activity.GetLogger(ctx).Info("paid", "id", pay.ID, "source", res.Source)
	return pay.ID, nil
}

// snapshot returns the POSTs, the activity attempts and the worker starts so far.
func (h *harness) snapshot() ([]post, int, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]post(nil), h.posts...), h.attempts, h.starts
}
