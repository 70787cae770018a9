package idem

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
	"github.com/idemkit/idem/profile"
)

// provider is a scripted payments API for one profile's test: each POST takes the next
// step of the script (or "ok"), and the ledger records every charge with its reference and
// the key it came under.
type provider struct {
	t      *testing.T
	mu     sync.Mutex
	script []string // per POST: "ok", "charge-500" (charge, answer 500, keep nothing), "charge-drop" (charge, cut the answer), or a literal "STATUS BODY"
	posts  []post
	charge []charge
	gets   []string // GET and cancel paths asked
	keyHdr string   // header carrying the key ("" : body member idempotency_key)
	byKey  map[string]string
	extra  func(w http.ResponseWriter, r *http.Request) bool // routes of the profile's settling
	clock  *fakeClock
}

func (p *provider) now() time.Time {
	if p.clock == nil {
		return time.Time{}
	}
	return p.clock.Now()
}

type post struct {
	key    string
	body   []byte
	header http.Header
}

type charge struct {
	ID     string    `json:"id"`
	Ref    string    `json:"reference"`
	Key    string    `json:"idempotency_key"`
	Status string    `json:"status"`
	At     time.Time `json:"-"`
}

func newProvider(t *testing.T, keyHdr string, script ...string) (*provider, *httptest.Server) {
	p := &provider{t: t, keyHdr: keyHdr, script: script, byKey: map[string]string{}}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	if r.Method != http.MethodPost || r.URL.Path != "/v1/payments" {
		p.gets = append(p.gets, r.Method+" "+r.URL.RequestURI())
		extra := p.extra
		p.mu.Unlock()
		if extra == nil || !extra(w, r) {
			http.NotFound(w, r)
		}
		return
	}
	body, _ := io.ReadAll(r.Body)
	key := r.Header.Get(p.keyHdr)
	if p.keyHdr == "" {
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		key, _ = m["idempotency_key"].(string)
	}
	p.posts = append(p.posts, post{key: key, body: body, header: r.Header.Clone()})
	step := "ok"
	if len(p.script) > 0 {
		step, p.script = p.script[0], p.script[1:]
	}
	var ref struct{ Reference string }
	_ = json.Unmarshal(body, &ref)
	doCharge := func() charge {
		c := charge{ID: fmt.Sprintf("pay_%d", len(p.charge)+1), Ref: ref.Reference, Key: key, Status: "succeeded", At: p.now()}
		p.charge = append(p.charge, c)
		return c
	}
	p.mu.Unlock()
	switch {
	case step == "ok":
		p.mu.Lock()
		c := doCharge()
		p.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(c)
	case step == "charge-500":
		p.mu.Lock()
		doCharge()
		p.mu.Unlock()
		w.WriteHeader(http.StatusInternalServerError)
	case step == "charge-drop" || step == "drop":
		if step == "charge-drop" {
			p.mu.Lock()
			doCharge()
			p.mu.Unlock()
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		require.NoError(p.t, err)
		conn.Close()
	default: // "STATUS BODY" or "STATUS header:value BODY"
		var code int
		var rest string
		_, _ = fmt.Sscanf(step, "%d", &code)
		rest = strings.TrimSpace(strings.TrimPrefix(step, fmt.Sprint(code)))
		if h, v, ok := strings.Cut(rest, ": "); ok && !strings.HasPrefix(rest, "{") {
			val, b, _ := strings.Cut(v, " ")
			w.Header().Set(h, val)
			rest = b
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, rest)
	}
}

func (p *provider) charges(ref string) (n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.charge {
		if c.Ref == ref && c.Status == "succeeded" {
			n++
		}
	}
	return n
}

func (p *provider) keys() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ks []string
	for _, q := range p.posts {
		ks = append(ks, q.key)
	}
	return ks
}

// searchRoute answers GET /v1/payments?reference=R from the ledger, hiding charges younger
// than lag by clock.
func (p *provider) searchRoute(clock *fakeClock, lag time.Duration) func(http.ResponseWriter, *http.Request) bool {
	p.clock = clock
	return func(w http.ResponseWriter, r *http.Request) bool {
		ref := r.URL.Query().Get("reference")
		if q := r.URL.Query().Get("query"); q != "" {
			ref = strings.TrimSuffix(strings.TrimPrefix(q, "metadata['reference']:'"), "'")
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		data := []charge{}
		for _, c := range p.charge {
			if c.Ref == ref && !c.At.Add(lag).After(clock.Now()) {
				data = append(data, c)
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
		return true
	}
}

func dialectClient(t *testing.T, base string, clock *fakeClock, p profile.Profile, mod func(*Config)) (*Client, keystore.Store) {
	t.Helper()
	store := keystore.NewMemory()
	cfg := Config{BaseURL: base, Store: store, Profile: p, Now: clock.Now, Sleep: clock.Sleep,
		Budget: BudgetConfig{Disabled: true}}
	if mod != nil {
		mod(&cfg)
	}
	c, err := NewClient(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c, store
}

func TestProfileRetentionCapsKeyTTL(t *testing.T) {
	_, err := NewClient(Config{BaseURL: "http://x", Profile: profile.PayPal, KeyTTL: 24 * time.Hour})
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "paypal's key retention of 6h0m0s")
	// A resend sent just inside KeyTTL must still arrive inside the retention: the
	// attempt's timeout and a minute less.
	_, err = NewClient(Config{BaseURL: "http://x", Profile: profile.PayPal, KeyTTL: 6 * time.Hour})
	require.ErrorIs(t, err, ErrInvalidConfig)
	c, err := NewClient(Config{BaseURL: "http://x", Profile: profile.PayPal})
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, 6*time.Hour-defaultAttemptTimeout-profile.DefaultLanding, c.cfg.KeyTTL)
	assert.Equal(t, "PayPal-Request-Id", c.cfg.KeyHeader)
	_, err = NewClient(Config{BaseURL: "http://x", Profile: profile.PayPal, KeyHeader: "Idempotency-Key"})
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = NewClient(Config{BaseURL: "http://x", Profile: profile.Profile{KeyHeader: "X"}})
	require.ErrorIs(t, err, ErrInvalidConfig, "a profile without a name")
}

// PayPal keeps a key 6 hours: a payment whose answer was lost and that is still pending
// past that is never resent (a resend would be a new payment); it goes manual.
func TestPayPalNeverResendsPastRetention(t *testing.T) {
	clock := newFakeClock()
	prov, srv := newProvider(t, "PayPal-Request-Id", "charge-drop", "charge-drop", "charge-drop", "charge-drop", "charge-drop")
	c, store := dialectClient(t, srv.URL, clock, profile.PayPal, func(cfg *Config) { cfg.Policy.MaxAttempts = 1 })
	_, err := c.Do(context.Background(), payment(100, "ord-1"))
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.Len(t, prov.keys(), 1)

	clock.Advance(6*time.Hour + time.Second)
	_, err = c.Recover(context.Background(), nil)
	require.NoError(t, err)
	assert.Len(t, prov.keys(), 1, "no resend past PayPal's 6 h retention")
	assert.Equal(t, 1, prov.charges("ord-1"))
	recs, err := store.List(context.Background())
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.Equal(t, keystore.StateManual, recs[0].State)
}

// Checkout.com keeps only 2xx answers: after a 500 that followed the charge, the same key
// would charge again. The client searches first, finds the charge, and sends nothing more.
func TestCheckoutSearchesBeforeResendAfter5xx(t *testing.T) {
	clock := newFakeClock()
	prov, srv := newProvider(t, "Cko-Idempotency-Key", "charge-500")
	prov.extra = prov.searchRoute(clock, 0)
	c, _ := dialectClient(t, srv.URL, clock, profile.Checkout, nil)
	res, err := c.Do(context.Background(), payment(100, "ord-1"))
	require.NoError(t, err)
	assert.Equal(t, outcome.SourceLookup, res.Source)
	assert.Equal(t, 1, res.Attempts)
	assert.Equal(t, 1, prov.charges("ord-1"))
	assert.Equal(t, []string{"GET /v1/payments?reference=ord-1"}, prov.gets)
}

// A 500 with nothing charged: the search finds nothing, the answer came (the request
// ended), so the resend goes at once, with the same key.
func TestCheckoutResendsAfterSearchFindsNothing(t *testing.T) {
	clock := newFakeClock()
	prov, srv := newProvider(t, "Cko-Idempotency-Key", "500 {}")
	prov.extra = prov.searchRoute(clock, 0)
	c, _ := dialectClient(t, srv.URL, clock, profile.Checkout, nil)
	res, err := c.Do(context.Background(), payment(100, "ord-1"))
	require.NoError(t, err)
	assert.Equal(t, outcome.SourceResponse, res.Source)
	keys := prov.keys()
	require.Len(t, keys, 2)
	assert.Equal(t, keys[0], keys[1])
	assert.Equal(t, 1, prov.charges("ord-1"))
}

// A cut answer with nothing found: the request may still execute, so "not found" counts
// only Landing after it; without a search route that answers, nothing is resent.
func TestCheckoutWaitsLandingAndNeverResendsBlind(t *testing.T) {
	clock := newFakeClock()
	prov, srv := newProvider(t, "Cko-Idempotency-Key", "charge-drop")
	prov.extra = func(w http.ResponseWriter, r *http.Request) bool { w.WriteHeader(503); return true }
	c, store := dialectClient(t, srv.URL, clock, profile.Checkout, nil)
	_, err := c.Do(context.Background(), payment(100, "ord-1"))
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	assert.Len(t, prov.keys(), 1, "no resend before a search said the payment is not there")
	assert.Equal(t, 1, prov.charges("ord-1"))
	recs, _ := store.List(context.Background())
	require.Len(t, recs, 1)
	assert.Equal(t, keystore.StatePending, recs[0].State)

}

// A cut answer and nothing charged: "not found" counts only Landing after that request
// (it may still execute); then the same key is resent.
func TestCheckoutNotFoundCountsAfterLanding(t *testing.T) {
	clock := newFakeClock()
	p := profile.Checkout.Clone()
	p.Settle[0].Landing = 5 * time.Second
	prov, srv := newProvider(t, "Cko-Idempotency-Key", "drop")
	prov.extra = prov.searchRoute(clock, 0)
	c, _ := dialectClient(t, srv.URL, clock, p, nil)
	res, err := c.Do(context.Background(), payment(100, "ord-2"))
	require.NoError(t, err)
	assert.Equal(t, outcome.SourceResponse, res.Source)
	keys := prov.keys()
	require.Len(t, keys, 2)
	assert.Equal(t, keys[0], keys[1])
	assert.Equal(t, 1, prov.charges("ord-2"))
	assert.Len(t, prov.gets, 2, "asked, waited out the landing, asked again")
	var waited time.Duration
	for _, d := range clock.Sleeps() {
		waited += d
	}
	assert.GreaterOrEqual(t, waited, 5*time.Second)
}

// Adyen answers a key in flight with errorCode 704: wait, same key.
func TestAdyen704Waits(t *testing.T) {
	clock := newFakeClock()
	prov, srv := newProvider(t, "Idempotency-Key", `422 {"status":422,"errorCode":"704","message":"request already processed or in progress"}`)
	c, _ := dialectClient(t, srv.URL, clock, syncAdyen, nil)
	res, err := c.Do(context.Background(), payment(100, "ord-1"))
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, res.StatusCode)
	keys := prov.keys()
	require.Len(t, keys, 2)
	assert.Equal(t, keys[0], keys[1])
	require.NotEmpty(t, clock.Sleeps())
	assert.Positive(t, clock.Sleeps()[0], "a wait before the resend")
}

// Adyen's 500 without transient-error must not be retried: the record goes manual and the
// cancel by reference makes "not executed" definite.
func TestAdyenCancelSettles(t *testing.T) {
	clock := newFakeClock()
	prov, srv := newProvider(t, "Idempotency-Key", "charge-500")
	var cancelBody string
	prov.extra = func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/cancels" {
			return false
		}
		b, _ := io.ReadAll(r.Body)
		cancelBody = string(b)
		var in struct{ PaymentReference string }
		_ = json.Unmarshal(b, &in)
		prov.mu.Lock()
		for i := range prov.charge {
			if prov.charge[i].Ref == in.PaymentReference {
				prov.charge[i].Status = "canceled"
			}
		}
		prov.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"status":"received"}`)
		return true
	}
	c, _ := dialectClient(t, srv.URL, clock, syncAdyen, nil)
	_, err := c.Do(context.Background(), payment(100, "ord-1", WithIntent("ord-1")))
	require.ErrorIs(t, err, ErrStoredServerError, "no cancel while a request of the key may still land")
	assert.Empty(t, cancelBody)
	clock.Advance(profile.DefaultLanding + defaultLeaseTTL) // the landing counts from the call's lease, which may have carried a send
	_, err = c.Do(context.Background(), payment(100, "ord-1", WithIntent("ord-1")))
	require.ErrorIs(t, err, ErrNotExecuted)
	assert.Len(t, prov.keys(), 1, "a 5xx without transient-error is never resent")
	assert.JSONEq(t, `{"paymentReference":"ord-1"}`, cancelBody)
	assert.Equal(t, 0, prov.charges("ord-1"), "the charge was canceled")
}

// GoCardless answers a repeat with a 409 naming the payment: fetched, it is the answer.
func TestGoCardlessPointerIsFetched(t *testing.T) {
	clock := newFakeClock()
	conflict := `409 {"error":{"type":"invalid_state","code":409,"errors":[{"reason":"idempotent_creation_conflict","message":"exists","links":{"conflicting_resource_id":"pay_1"}}]}}`
	prov, srv := newProvider(t, "Idempotency-Key", "charge-500", conflict)
	prov.extra = func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/v1/payments/pay_1" {
			return false
		}
		_, _ = io.WriteString(w, `{"id":"pay_1","reference":"ord-1","status":"succeeded"}`)
		return true
	}
	c, store := dialectClient(t, srv.URL, clock, profile.GoCardless, nil)
	res, err := c.Do(context.Background(), payment(100, "ord-1"))
	require.NoError(t, err)
	assert.Equal(t, outcome.SourceLookup, res.Source)
	assert.JSONEq(t, `{"id":"pay_1","reference":"ord-1","status":"succeeded"}`, string(res.Body))
	assert.Len(t, prov.keys(), 2)
	assert.Equal(t, 1, prov.charges("ord-1"))
	rec, err := store.Get(context.Background(), "", res.Key)
	require.NoError(t, err)
	assert.Equal(t, keystore.StateSucceeded, rec.State)
}

// Stripe replays a stored 500; its search may lag a minute: "not found" before the lag
// keeps the record manual, and the charge found after it settles it as executed.
func TestStripeSearchLagIsWaitedOut(t *testing.T) {
	clock := newFakeClock()
	prov, srv := newProvider(t, "Idempotency-Key", `500 Idempotent-Replayed: true {"error":{"type":"api_error"}}`)
	prov.extra = prov.searchRoute(clock, time.Minute)
	c, _ := dialectClient(t, srv.URL, clock, profile.Stripe, nil)
	prov.mu.Lock()
	prov.charge = append(prov.charge, charge{ID: "pay_1", Ref: "ord-1", Status: "succeeded", At: clock.Now()})
	prov.mu.Unlock()
	op := payment(100, "ord-1", WithIntent("order-1"))
	_, err := c.Do(context.Background(), op)
	require.ErrorIs(t, err, ErrStoredServerError)
	require.Len(t, prov.gets, 1, "the lookup was asked")

	clock.Advance(time.Minute + time.Second)
	res, err := c.Do(context.Background(), payment(100, "ord-1", WithIntent("order-1")))
	require.NoError(t, err)
	assert.Equal(t, outcome.SourceLookup, res.Source)
	assert.Contains(t, string(res.Body), `"pay_1"`)
	assert.Len(t, prov.keys(), 1, "never resent")
}

// Square's key travels in the body: byte-identical on every attempt, no key header.
func TestSquareKeyInBody(t *testing.T) {
	clock := newFakeClock()
	prov, srv := newProvider(t, "", "503 {}")
	c, _ := dialectClient(t, srv.URL, clock, profile.Square, nil)
	res, err := c.Do(context.Background(), NewOperation(http.MethodPost, "/v1/payments", []byte(`{"amount":100,"reference":"ord-1"}`)))
	require.NoError(t, err)
	require.Len(t, prov.posts, 2)
	want := `{"idempotency_key":"` + res.Key + `","amount":100,"reference":"ord-1"}`
	assert.Equal(t, want, string(prov.posts[0].body))
	assert.Equal(t, want, string(prov.posts[1].body))
	assert.Empty(t, prov.posts[0].header.Get("Idempotency-Key"), "no key header")

	_, err = c.Do(context.Background(), NewOperation(http.MethodPost, "/v1/payments", []byte(`[1]`)))
	require.ErrorIs(t, err, ErrInvalidOperation)
	_, err = c.Do(context.Background(), NewOperation(http.MethodPost, "/v1/payments", []byte(`{"idempotency_key":"other"}`)))
	require.ErrorIs(t, err, ErrInvalidOperation)
	_, err = c.Do(context.Background(), NewOperation(http.MethodPost, "/v1/payments", paymentBody(1, "x"), WithKey(strings.Repeat("k", 46))))
	require.ErrorIs(t, err, ErrInvalidOperation, "Square accepts keys of at most 45 characters")
	assert.Len(t, prov.posts, 2, "nothing sent for a refused operation")
}

// Increase lists payments by idempotency key: a cut answer is settled by the list.
func TestIncreaseListByKey(t *testing.T) {
	clock := newFakeClock()
	prov, srv := newProvider(t, "Idempotency-Key", "charge-drop")
	prov.extra = func(w http.ResponseWriter, r *http.Request) bool {
		k := r.URL.Query().Get("idempotency_key")
		prov.mu.Lock()
		defer prov.mu.Unlock()
		data := []charge{}
		for _, c := range prov.charge {
			if c.Key == k {
				data = append(data, c)
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
		return true
	}
	c, _ := dialectClient(t, srv.URL, clock, profile.Increase, nil)
	res, err := c.Do(context.Background(), payment(100, "ord-1"))
	require.NoError(t, err)
	assert.Equal(t, outcome.SourceKeyStatus, res.Source)
	assert.Len(t, prov.keys(), 1)
	assert.Equal(t, []string{"GET /v1/payments?idempotency_key=" + res.Key}, prov.gets)
}

// Stripe's client_secret never reaches the keystore; the caller gets it.
func TestRedactFieldsInStoredAnswer(t *testing.T) {
	clock := newFakeClock()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"id":"pi_1","client_secret":"pi_1_secret_abc","nested":{"token":"t"}}`)
	}))
	defer srv.Close()
	c, store := dialectClient(t, srv.URL, clock, profile.Stripe, func(cfg *Config) { cfg.RedactFields = []string{"token"} })
	res, err := c.Do(context.Background(), payment(100, "ord-1"))
	require.NoError(t, err)
	assert.Contains(t, string(res.Body), "pi_1_secret_abc")
	rec, err := store.Get(context.Background(), "", res.Key)
	require.NoError(t, err)
	assert.Equal(t, `{"id":"pi_1","client_secret":null,"nested":{"token":null}}`, string(rec.Response.Body))
}

// Increase's list by key also settles a stored 5xx (a manual record): the charge listed
// under the key is the answer.
func TestIncreaseListByKeySettlesStoredError(t *testing.T) {
	clock := newFakeClock()
	prov, srv := newProvider(t, "Idempotency-Key", `500 Idempotent-Replayed: true {"type":"internal_server_error"}`)
	prov.extra = func(w http.ResponseWriter, r *http.Request) bool {
		_ = json.NewEncoder(w).Encode(map[string]any{"data": []charge{{ID: "pay_1", Ref: "ord-1", Key: r.URL.Query().Get("idempotency_key"), Status: "succeeded"}}})
		return true
	}
	c, _ := dialectClient(t, srv.URL, clock, profile.Increase, nil)
	res, err := c.Do(context.Background(), payment(100, "ord-1"))
	require.NoError(t, err)
	assert.Equal(t, outcome.SourceLookup, res.Source)
	assert.Contains(t, string(res.Body), `"pay_1"`)
	assert.Len(t, prov.keys(), 1)
}

// failManual is a store whose write of a manual record fails.
type failManual struct{ keystore.Store }

func (f failManual) Update(ctx context.Context, rec *keystore.Record) error {
	if rec.State == keystore.StateManual {
		return fmt.Errorf("disk full")
	}
	return f.Store.Update(ctx, rec)
}

func (f failManual) ClaimManual(ctx context.Context, scope, key string, l keystore.Lease) (*keystore.Record, error) {
	return keystore.ClaimManual(ctx, f.Store, scope, key, l)
}

// A cancel acts on the provider: it goes only once the record is durably manual. A record
// whose manual write failed stays pending, and a later resend would take the provider's
// replay of the canceled charge for a success.
func TestCancelOnlyAfterDurableManualWrite(t *testing.T) {
	clock := newFakeClock()
	prov, srv := newProvider(t, "Idempotency-Key", "charge-500")
	cancels := 0
	prov.extra = func(w http.ResponseWriter, r *http.Request) bool {
		cancels++
		w.WriteHeader(http.StatusCreated)
		return true
	}
	p := syncAdyen.Clone()
	p.Settle[1].Landing = time.Nanosecond
	c, _ := dialectClient(t, srv.URL, clock, p, func(cfg *Config) {
		cfg.Store = failManual{keystore.NewMemory()}
		cfg.Now = func() time.Time { clock.Advance(time.Millisecond); return clock.Now() } // past the landing at once
	})
	_, err := c.Do(context.Background(), payment(100, "ord-1"))
	require.ErrorIs(t, err, ErrStoredServerError)
	assert.Zero(t, cancels, "no cancel while the manual record is not written")
}

// A Checkout payment whose answer was cut, driven again by calls each shorter than the
// landing: the landing counts from the last send, not from the last call's end, so the key
// is resent once it has passed, never before.
func TestCheckoutLandingIsNotPushedBackByCallsThatSendNothing(t *testing.T) {
	clock := newFakeClock()
	prov, srv := newProvider(t, "Cko-Idempotency-Key", "drop")
	search := prov.searchRoute(clock, 0)
	prov.extra = search
	c, _ := dialectClient(t, srv.URL, clock, profile.Checkout, nil)
	op := func() *Operation { return payment(100, "ord-1", WithIntent("ord-1")) }
	sent := clock.Now()
	_, err := c.Do(context.Background(), op(), CallMaxElapsed(5*time.Second))
	require.ErrorIs(t, err, ErrExhausted, "the landing (1 min) does not fit in 5 s")
	var res *Result
	for round := 0; round < 30 && err != nil; round++ {
		clock.Advance(5 * time.Second)
		res, err = c.Do(context.Background(), op(), CallMaxElapsed(5*time.Second))
		if len(prov.keys()) > 1 {
			break
		}
	}
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, res.StatusCode)
	require.Len(t, prov.keys(), 2)
	assert.GreaterOrEqual(t, clock.Now().Sub(sent), profile.DefaultLanding, "never resent before the landing")
	assert.Equal(t, 1, prov.charges("ord-1"))
}
