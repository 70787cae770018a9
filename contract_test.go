package idem

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

// fixedAnswer always answers status with header and body, and counts requests.
func fixedAnswer(status int, body string, header ...string) (http.Handler, *atomic.Int64) {
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}), &n
}

// 422 is a key conflict only when the answer names key reuse; any other 422 is a validation
// failure carrying its response.
func TestUnprocessableEntityRule(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    string
		extra   outcome.Classifier
		want    error
		wantNot error
	}{
		{"idemtest / draft style code", `{"error":"idempotency_key_reused"}`, nil, ErrKeyConflict, ErrPermanent},
		{"Stripe style type", `{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters"}}`, nil, ErrKeyConflict, ErrPermanent},
		{"problem type", `{"type":"https://example.com/problems/idempotency-key-reuse","title":"Conflict"}`, nil, ErrKeyConflict, ErrPermanent},
		{"validation", `{"error":"invalid_request","param":"amount"}`, nil, ErrPermanent, ErrKeyConflict},
		{"not JSON", `amount must be positive`, nil, ErrPermanent, ErrKeyConflict},
		{"empty", ``, nil, ErrPermanent, ErrKeyConflict},
		{"caller's own code", `{"code":"DUPLICATE_REQUEST_ID"}`, outcome.KeyConflictCodes("DUPLICATE_REQUEST_ID"), ErrKeyConflict, ErrPermanent},
		{"caller's code list, other code", `{"code":"AMOUNT_TOO_LOW"}`, outcome.KeyConflictCodes("DUPLICATE_REQUEST_ID"), ErrPermanent, ErrKeyConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, n := fixedAnswer(http.StatusUnprocessableEntity, tc.body, "Content-Type", "application/json")
			c, _, store := scriptedClient(t, h, func(c *Config) {
				if tc.extra != nil {
					c.Classifiers = append(outcome.Classifiers{tc.extra}, outcome.DefaultClassifiers()...)
				}
			})
			op := payment(1, "r")
			_, err := c.Do(context.Background(), op)
			require.ErrorIs(t, err, tc.want)
			assert.NotErrorIs(t, err, tc.wantNot)
			assert.Equal(t, int64(1), n.Load(), "never retried")
			oe := opErr(t, err)
			require.NotNil(t, oe.Response)
			assert.Equal(t, 422, oe.Response.StatusCode)
			assert.Equal(t, tc.body, string(oe.Response.Body))
			rec, err := store.Get(context.Background(), "", op.Key())
			require.NoError(t, err)
			assert.Equal(t, keystore.StateFailed, rec.State)
			assert.Equal(t, tc.body, string(rec.Response.Body))
		})
	}
}

// A key-reuse answer ends the call as ErrKeyConflict naming the cause: a 422 whose body names
// key reuse anywhere IsKeyReuse looks (also in an "errors" array), or a 400 whose body names
// it precisely (Stripe documents key reuse as HTTP 400 idempotency_error), even with
// Stripe-Should-Retry: false. A 400 that only mentions idempotency (a missing or malformed
// key) stays a validation failure.
func TestKeyReuseAnswers(t *testing.T) {
	const stripe = `{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters they were first used with."}}`
	for _, tc := range []struct {
		name   string
		status int
		body   string
		header []string
		extra  outcome.Classifier
		want   error
	}{
		{"Stripe 400", 400, stripe, nil, nil, ErrKeyConflict},
		{"Stripe 400, do not retry", 400, stripe, []string{"Stripe-Should-Retry", "false"}, nil, ErrKeyConflict},
		{"errors array 400", 400, `{"errors":[{"code":"idempotency_key_reused","detail":"x"}]}`, nil, nil, ErrKeyConflict},
		{"errors array 422", 422, `{"errors":[{"title":"bad"},{"code":"idempotency_key_reused"}]}`, nil, nil, ErrKeyConflict},
		{"problem type 400", 400, `{"type":"https://idemkit.dev/problems/idempotency-key-reused","status":400}`, nil, nil, ErrKeyConflict},
		{"payload mismatch 400", 400, `{"code":"IDEMPOTENCY_KEY_PAYLOAD_MISMATCH"}`, nil, nil, ErrKeyConflict},
		{"caller's code 400", 400, `{"code":"DUPLICATE_REQUEST_ID"}`, nil, outcome.KeyConflictCodes("DUPLICATE_REQUEST_ID"), ErrKeyConflict},
		{"missing key 400", 400, `{"type":"https://docs.upvest.co/errors/missing_idempotency_key","status":400,"title":"Missing idempotency key"}`, nil, nil, ErrPermanent},
		{"invalid key 400", 400, `{"type":"https://idemkit.dev/problems/idempotency-key-invalid","title":"Invalid Idempotency-Key","status":400}`, nil, nil, ErrPermanent},
		{"validation 400", 400, `{"error":{"type":"invalid_request_error","param":"amount"}}`, []string{"Stripe-Should-Retry", "false"}, nil, ErrPermanent},
		{"errors array, validation 422", 422, `{"errors":[{"code":"amount_too_low"}]}`, nil, nil, ErrPermanent},
		{"Stripe type on 403", 403, stripe, nil, nil, ErrPermanent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, n := fixedAnswer(tc.status, tc.body, append([]string{"Content-Type", "application/json"}, tc.header...)...)
			c, _, store := scriptedClient(t, h, func(c *Config) {
				if tc.extra != nil {
					c.Classifiers = append(outcome.Classifiers{tc.extra}, outcome.DefaultClassifiers()...)
				}
			})
			op := payment(1, "r")
			_, err := c.Do(context.Background(), op)
			require.ErrorIs(t, err, tc.want)
			other := ErrKeyConflict
			if tc.want == ErrKeyConflict {
				other = ErrPermanent
				assert.Contains(t, err.Error(), "as already used with another request (HTTP "+strconv.Itoa(tc.status)+"); every request of the key from this keystore had the same method, URL and body")
				assert.Contains(t, err.Error(), "a header the server compares")
			}
			assert.NotErrorIs(t, err, other)
			assert.Equal(t, int64(1), n.Load(), "never retried")
			oe := opErr(t, err)
			require.NotNil(t, oe.Response)
			assert.Equal(t, tc.status, oe.Response.StatusCode)
			assert.Equal(t, tc.body, string(oe.Response.Body))
			rec, err := store.Get(context.Background(), "", op.Key())
			require.NoError(t, err)
			assert.Equal(t, keystore.StateFailed, rec.State)
		})
	}
}

// keyRecorder answers POSTs from a script and the status endpoint with not_found, and
// records every Idempotency-Key header set it saw, in order.
type keyRecorder struct {
	mu    sync.Mutex
	codes []int
	seen  [][]string // values of the key header per request
	paths []string
}

func (k *keyRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k.mu.Lock()
	k.seen = append(k.seen, r.Header.Values("Idempotency-Key"))
	k.paths = append(k.paths, r.Method+" "+r.URL.Path)
	var code int
	if r.Method == http.MethodGet {
		code = http.StatusNotFound
	} else if len(k.codes) > 0 {
		code, k.codes = k.codes[0], k.codes[1:]
	} else {
		code = http.StatusCreated
	}
	k.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if code == http.StatusNotFound {
		_, _ = io.WriteString(w, `{"status":"not_found"}`)
	}
}

// A caller's own key header, in any letter case, is the operation's key: persisted, sent
// once on every attempt and every status check.
func TestCallerKeyHeaderAdopted(t *testing.T) {
	for _, name := range []string{"Idempotency-Key", "idempotency-key", "IDEMPOTENCY-KEY"} {
		t.Run(name, func(t *testing.T) {
			kr := &keyRecorder{codes: []int{http.StatusBadGateway}}
			c, _, store := scriptedClient(t, kr, func(c *Config) { c.KeyStatusURL = statusPath })
			op := NewOperation(http.MethodPost, "/v1/payments", paymentBody(1, "r"),
				WithHeader(http.Header{name: {"order-77-key"}, "X-Trace": {"t1"}}))
			res, err := c.Do(context.Background(), op)
			require.NoError(t, err)
			assert.Equal(t, "order-77-key", res.Key)
			assert.Equal(t, 2, res.Attempts)
			assert.Equal(t, 1, res.KeyStatusChecks)
			assert.Equal(t, []string{"POST /v1/payments", "GET /v1/payments/operations/order-77-key", "POST /v1/payments"}, kr.paths)
			for i, vs := range kr.seen {
				assert.Equal(t, []string{"order-77-key"}, vs, "request %d carries one identical key", i)
			}
			rec, err := store.Get(context.Background(), "", "order-77-key")
			require.NoError(t, err)
			assert.Equal(t, keystore.StateSucceeded, rec.State)
			for k := range rec.Request.Header {
				assert.False(t, strings.EqualFold(k, "Idempotency-Key"), "the key lives in Record.Key, not twice")
			}
			assert.Equal(t, "t1", rec.Request.Header.Get("X-Trace"))
		})
	}
}

func TestCallerKeyHeaderRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []OperationOption
	}{
		{"conflicts with WithKey", []OperationOption{WithKey("a"), WithHeader(http.Header{"idempotency-key": {"b"}})}},
		{"two values", []OperationOption{WithHeader(http.Header{"Idempotency-Key": {"a", "b"}})}},
		{"two spellings", []OperationOption{WithHeader(http.Header{"Idempotency-Key": {"a"}, "idempotency-key": {"a"}})}},
		{"invalid key", []OperationOption{WithHeader(http.Header{"Idempotency-Key": {"has space"}})}},
		{"empty key", []OperationOption{WithHeader(http.Header{"Idempotency-Key": {""}})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kr := &keyRecorder{}
			c, _, store := scriptedClient(t, kr, nil)
			_, err := c.Do(context.Background(), NewOperation(http.MethodPost, "/v1/payments", paymentBody(1, "r"), tc.opts...))
			require.ErrorIs(t, err, ErrInvalidOperation)
			recs, lerr := store.List(context.Background())
			require.NoError(t, lerr)
			assert.Empty(t, recs, "nothing persisted")
			assert.Empty(t, kr.seen, "nothing sent")
		})
	}
	// With KeyAsSFString a quoted key header is unquoted once, then sent quoted once.
	sfr := &keyRecorder{}
	csf, _, _ := scriptedClient(t, sfr, func(c *Config) { c.KeyAsSFString = true })
	res, err := csf.Do(context.Background(), NewOperation(http.MethodPost, "/v1/payments", paymentBody(1, "r"),
		WithHeader(http.Header{"Idempotency-Key": {`"k-\"q\""`}})))
	require.NoError(t, err)
	assert.Equal(t, `k-"q"`, res.Key)
	assert.Equal(t, [][]string{{`"k-\"q\""`}}, sfr.seen)

	// The same value as WithKey is no conflict.
	kr := &keyRecorder{}
	c, _, _ := scriptedClient(t, kr, nil)
	res, err = c.Do(context.Background(), NewOperation(http.MethodPost, "/v1/payments", paymentBody(1, "r"),
		WithKey("same"), WithHeader(http.Header{"idempotency-key": {"same"}})))
	require.NoError(t, err)
	assert.Equal(t, "same", res.Key)
	assert.Equal(t, [][]string{{"same"}}, kr.seen)
}

// Every stop after the server answered carries that answer, and the record keeps it.
func TestStopCarriesLastResponse(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		retryAfter string
		opts       []CallOption
		ctx        func() (context.Context, context.CancelFunc)
		want       error
		attempts   int
	}{
		{"attempts exhausted", "0", []CallOption{CallMaxAttempts(2)}, nil, ErrExhausted, 2},
		{"Retry-After too long", "3600", nil, nil, ErrRetryAfterTooLong, 1},
		{"deadline before the next attempt", "", []CallOption{CallBackoff(time.Minute, 1, NoJitter, time.Minute)},
			func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 5*time.Second) }, ErrDeadline, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := []string{"Content-Type", "application/json", "X-Request-Id", "req_1"}
			if tc.retryAfter != "" {
				hdr = append(hdr, "Retry-After", tc.retryAfter)
			}
			h, n := fixedAnswer(http.StatusServiceUnavailable, `{"error":"overloaded"}`, hdr...)
			c, _, store := scriptedClient(t, h, nil)
			callCtx := ctx
			if tc.ctx != nil {
				var cancel context.CancelFunc
				callCtx, cancel = tc.ctx()
				defer cancel()
			}
			op := payment(1, "r")
			_, err := c.Do(callCtx, op, tc.opts...)
			require.ErrorIs(t, err, tc.want)
			assert.Equal(t, int64(tc.attempts), n.Load())
			oe := opErr(t, err)
			require.NotNil(t, oe.Response, "the last answer is carried")
			assert.Equal(t, 503, oe.Response.StatusCode)
			assert.Equal(t, "req_1", oe.Response.Header.Get("X-Request-Id"))
			assert.Equal(t, `{"error":"overloaded"}`, string(oe.Response.Body))
			rec, err := store.Get(ctx, "", op.Key())
			require.NoError(t, err)
			assert.Equal(t, keystore.StatePending, rec.State)
			require.NotNil(t, rec.Response, "the record keeps it")
			assert.Equal(t, 503, rec.Response.StatusCode)
			assert.Equal(t, `{"error":"overloaded"}`, string(rec.Response.Body))
		})
	}
	// The budget stop carries it too.
	h, _ := fixedAnswer(http.StatusServiceUnavailable, `{"error":"down"}`, "Retry-After", "0")
	c, _, _ := scriptedClient(t, h, func(c *Config) { c.Budget = BudgetConfig{Capacity: 5, RetryCost: 10} })
	_, err := c.Do(ctx, payment(1, "r"))
	require.ErrorIs(t, err, ErrBudgetExhausted)
	require.NotNil(t, opErr(t, err).Response)
	assert.Equal(t, `{"error":"down"}`, string(opErr(t, err).Response.Body))
}

// A deadline that passes during an attempt ends the call with ErrCanceled, which matches
// context.DeadlineExceeded too (README: test that to catch both), outcome unknown, record
// pending.
func TestDeadlineDuringAttemptIsCanceled(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // hold the answer past the caller's deadline
		case <-release:
		case <-r.Context().Done():
		}
	})
	c, _, store := scriptedClient(t, h, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	op := payment(1, "deadline-in-attempt")
	_, err := c.Do(ctx, op)
	require.ErrorIs(t, err, ErrCanceled)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorIs(t, err, ErrDeadline)
	assert.True(t, opErr(t, err).Unknown, "the request was written: it may have executed")
	rec, gerr := store.Get(context.Background(), "", op.Key())
	require.NoError(t, gerr)
	assert.Equal(t, keystore.StatePending, rec.State)
}

// A stop because the context deadline comes before the next attempt is both ErrDeadline
// and context.DeadlineExceeded.
func TestDeadlineMatchesContextDeadline(t *testing.T) {
	h, n := fixedAnswer(http.StatusServiceUnavailable, ``)
	c, clock, _ := scriptedClient(t, h, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Do(ctx, payment(1, "r"), CallBackoff(30*time.Second, 1, NoJitter, 30*time.Second))
	require.ErrorIs(t, err, ErrDeadline)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorIs(t, err, ErrCanceled)
	assert.Equal(t, int64(1), n.Load())
	assert.Empty(t, clock.Sleeps(), "no sleep into the deadline")

	// A Retry-After within the cap that passes both the context deadline and MaxElapsed: the
	// nearer wall, the context's, names the stop (it was ErrRetryAfterTooLong, which a caller
	// testing context.DeadlineExceeded missed).
	h, n = fixedAnswer(http.StatusServiceUnavailable, ``, "Retry-After", "120")
	c, clock, _ = scriptedClient(t, h, nil)
	_, err = c.Do(ctx, payment(1, "r"), CallMaxRetryAfter(5*time.Minute))
	require.ErrorIs(t, err, ErrDeadline)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorIs(t, err, ErrRetryAfterTooLong)
	assert.Equal(t, 120*time.Second, opErr(t, err).RetryAfter)
	assert.Equal(t, int64(1), n.Load())
	assert.Empty(t, clock.Sleeps())
}

// Calls whose retries end in a definitive answer give their tokens back: a run of them
// never drains the bucket, and a 503 afterwards is still retried.
func TestBudgetRefundOnDefinitiveAnswers(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen[r.Header.Get("Idempotency-Key")]++
		n := seen[r.Header.Get("Idempotency-Key")]
		mu.Unlock()
		switch {
		case n == 1:
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
		case strings.Contains(string(body), "bad"):
			w.WriteHeader(http.StatusBadRequest)
		case strings.Contains(string(body), "conflict"):
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, `{"error":"idempotency_key_reused"}`)
		default:
			w.WriteHeader(http.StatusCreated)
		}
	})
	c, _, _ := scriptedClient(t, h, func(c *Config) { c.Budget = BudgetConfig{Capacity: 10, RetryCost: 5, SuccessRefund: 1} })
	ctx := context.Background()
	for i, ref := range []string{"bad-1", "bad-2", "conflict-3", "bad-4", "bad-5"} {
		_, err := c.Do(ctx, payment(1, ref))
		require.Error(t, err)
		assert.NotErrorIs(t, err, ErrBudgetExhausted, "call %d", i)
		assert.Equal(t, 2, opErr(t, err).Attempts, "call %d retried its 503", i)
		assert.Equal(t, 10, c.budget.tokens(), "call %d gave its tokens back", i)
	}
	res, err := c.Do(ctx, payment(1, "good"))
	require.NoError(t, err)
	assert.Equal(t, 2, res.Attempts, "the 503 is still retried")
	assert.Equal(t, 10, c.budget.tokens())
}

// NewClient refuses configurations that cannot work, naming the field.
func TestNewClientRefusesUnworkableConfig(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string // "" means accepted
	}{
		{"relative KeyStatusURL without BaseURL", Config{KeyStatusURL: "/v1/payments/operations/{key}"}, "KeyStatusURL"},
		{"absolute KeyStatusURL without BaseURL", Config{KeyStatusURL: "https://api.example.com/ops/{key}"}, ""},
		{"relative KeyStatusURL with BaseURL", Config{BaseURL: "https://api.example.com", KeyStatusURL: "/ops/{key}"}, ""},
		{"Retention shorter than the default KeyTTL", Config{Retention: time.Hour}, "Retention"},
		{"Retention shorter than KeyTTL", Config{KeyTTL: 72 * time.Hour, Retention: 48 * time.Hour}, "Retention"},
		{"KeyTTL longer than the default Retention", Config{KeyTTL: 96 * time.Hour}, "Retention"},
		{"Retention equal to KeyTTL", Config{KeyTTL: 2 * time.Hour, Retention: 2 * time.Hour}, ""},
		{"BaseURL with user and password", Config{BaseURL: "https://user:pass@api.example.com"}, "BaseURL"},
		// A relative operation URL is appended to the base's path: behind a query or a fragment
		// it would be sent as query text, or dropped.
		{"BaseURL with a query", Config{BaseURL: "https://api.example.com?tenant=1"}, "BaseURL"},
		{"BaseURL with an empty query", Config{BaseURL: "https://api.example.com/v2?"}, "BaseURL"},
		{"BaseURL with a fragment", Config{BaseURL: "https://api.example.com/v2#x"}, "BaseURL"},
		{"BaseURL with an empty fragment", Config{BaseURL: "https://api.example.com/#"}, "BaseURL"},
		{"BaseURL with a user only", Config{BaseURL: "https://sk_live_x@api.example.com"}, "BaseURL"},
		{"KeyHeader Authorization", Config{KeyHeader: "Authorization"}, "KeyHeader"},
		{"KeyHeader cookie", Config{KeyHeader: "cookie"}, "KeyHeader"},
		{"KeyHeader Proxy-Authorization", Config{KeyHeader: "PROXY-AUTHORIZATION"}, "KeyHeader"},
		{"KeyHeader Set-Cookie", Config{KeyHeader: "Set-Cookie"}, "KeyHeader"},
		{"KeyHeader among SecretHeaders", Config{KeyHeader: "X-Op-Key", SecretHeaders: []string{"X-Api-Key", "x-op-key"}}, "SecretHeaders"},
		{"SecretHeaders names the default key header", Config{SecretHeaders: []string{"idempotency-key"}}, "SecretHeaders"},
		{"SecretHeaders without the key header", Config{SecretHeaders: []string{"X-Api-Key"}}, ""},
		{"custom KeyHeader", Config{KeyHeader: "X-Op-Key"}, ""},
		{"Owner not UTF-8", Config{Fleet: FleetConfig{Owner: "node-\xff"}}, "Owner"},
		{"Owner in UTF-8", Config{Fleet: FleetConfig{Owner: "nœud-1"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewClient(tc.cfg)
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.field)
		})
	}
}

// A 5xx the server says not to retry is not a failure either: the effect is unknown.
func TestDoNotRetry5xxIsStoredServerError(t *testing.T) {
	h, n := fixedAnswer(http.StatusInternalServerError, `{"error":"internal"}`, "Stripe-Should-Retry", "false")
	c, _, store := scriptedClient(t, h, nil)
	op := payment(1, "r")
	_, err := c.Do(context.Background(), op)
	require.ErrorIs(t, err, ErrStoredServerError)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	assert.NotErrorIs(t, err, ErrPermanent)
	assert.Equal(t, int64(1), n.Load())
	rec, err := store.Get(context.Background(), "", op.Key())
	require.NoError(t, err)
	assert.Equal(t, keystore.StateManual, rec.State)
	assert.Equal(t, keystore.ReasonStoredServerError, rec.Reason)

	// A replayed 4xx stays the server's decision: permanent, failed.
	h4, _ := fixedAnswer(http.StatusBadRequest, `{"error":"invalid_request"}`, "Idempotent-Replayed", "true")
	c4, _, store4 := scriptedClient(t, h4, nil)
	op4 := payment(1, "r4")
	_, err = c4.Do(context.Background(), op4)
	require.ErrorIs(t, err, ErrPermanent)
	assert.NotErrorIs(t, err, ErrOutcomeUnknown)
	rec4, err := store4.Get(context.Background(), "", op4.Key())
	require.NoError(t, err)
	assert.Equal(t, keystore.StateFailed, rec4.State)
}

// A "do not retry" hint on an answer whose request may have been executed (a proxy's 408 or
// 425, a 409) never makes the payment failed: the status endpoint is asked and finds the
// charge, and nothing is sent twice.
func TestDoNotRetryHintNeverFailsAPossiblyExecutedPayment(t *testing.T) {
	for _, code := range []int{http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			clock := newFakeClock()
			api := idemtest.NewHandler(idemtest.Config{Now: clock.Now})
			var posts atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost && posts.Add(1) == 1 {
					api.ServeHTTP(httptest.NewRecorder(), r) // charged and stored...
					w.Header().Set("Stripe-Should-Retry", "false")
					w.WriteHeader(code) // ...but a proxy answers this
					return
				}
				api.ServeHTTP(w, r)
			}))
			t.Cleanup(srv.Close)
			store := keystore.NewMemory()
			c, err := NewClient(Config{BaseURL: srv.URL, Store: store, KeyStatusURL: statusPath,
				Now: clock.Now, Sleep: clock.Sleep, Budget: BudgetConfig{Disabled: true}})
			require.NoError(t, err)
			op := payment(500, "hint-"+strconv.Itoa(code))
			res, err := c.Do(context.Background(), op, CallMaxAttempts(3))
			require.NoError(t, err)
			assert.Equal(t, http.StatusCreated, res.StatusCode)
			assert.Equal(t, outcome.SourceKeyStatus, res.Source)
			assert.Equal(t, 1, res.Attempts)
			assert.Equal(t, 1, res.KeyStatusChecks)
			st := api.Stats()
			assert.Equal(t, 1, st.Executions)
			assert.Equal(t, 1, st.Requests)
			rec, err := store.Get(context.Background(), "", op.Key())
			require.NoError(t, err)
			assert.Equal(t, keystore.StateSucceeded, rec.State)
		})
	}
}
