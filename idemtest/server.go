package idemtest

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/idemserver"
)

// Paths, headers and defaults of the API.
const (
	// PaymentsPath is the endpoint that creates a payment (POST).
	PaymentsPath = "/v1/payments"
	// KeyStatusPathPattern is the ServeMux pattern of the status endpoint (GET).
	KeyStatusPathPattern = "/v1/payments/operations/{key}"
	// DefaultKeyHeader is the idempotency key header read when Config.KeyHeader is empty.
	DefaultKeyHeader = idemserver.DefaultKeyHeader
	// ReplayedHeader is set to "true" on every answer replayed from a stored result.
	ReplayedHeader = idemserver.ReplayedHeader
	// DefaultRetryAfter is the Retry-After, in seconds, used when Config.RetryAfter is 0.
	DefaultRetryAfter = 1
	// DefaultSlowDelay is how long FaultSlow holds a request when Config.SlowDelay is 0.
	DefaultSlowDelay = 2 * time.Second
	// MaxKeyLength is the longest idempotency key accepted, in bytes (visible ASCII characters,
	// after unquoting): idemserver's limit.
	MaxKeyLength = idemserver.MaxKeyLength
)

const statusSuffix = "/operations/"

// KeyStatusPath returns the status endpoint path for key under [PaymentsPath], escaped.
func KeyStatusPath(key string) string {
	return PaymentsPath + statusSuffix + url.PathEscape(key)
}

// Config configures a [Handler]. The zero value is a fault-free server with the defaults,
// speaking idem's own dialect.
type Config struct {
	// Dialect is the provider whose idempotency semantics the API speaks: one of Dialects()
	// (DialectIdem, DialectIETF, DialectStripe, ...); "" means DialectIdem. NewHandler panics
	// on an unknown name: check a name from outside with ValidDialect.
	Dialect string
	// KeyHeader is the idempotency key header name; "" means the dialect's carrier
	// (KeyCarrier: DefaultKeyHeader for idem). Ignored by square, whose key is a body field.
	KeyHeader string
	// KeyRetention is how long a key is remembered, counted from its first request (measured
	// with Now): a key sent again after it is a new request. 0 means the dialect's default
	// (PayPalKeyRetention for paypal, AdyenKeyRetention for adyen, DefaultKeyRetention for
	// the others on idemtest's own key store); a negative value means never forgotten. For
	// idem and ietf a positive value is idemserver's Config.Retention (counted from the
	// answer) and 0 or less keeps idemserver's default.
	KeyRetention time.Duration
	// SearchLag is how long a charge stays invisible to the stripe dialects' search
	// (GET <path>/search), measured with Now from the charge's execution; 0 means
	// DefaultSearchLag for stripe and stripe-v2, a negative value means no lag. Other
	// dialects' lookups are consistent and ignore it.
	SearchLag time.Duration

	// FaultRate is the probability (0..1) that a POST with no scripted fault left gets a
	// random fault, chosen uniformly from Faults.
	FaultRate float64
	// Seed seeds the random fault source: the same seed and the same order of arrivals give
	// the same faults. The zero seed is a valid, deterministic seed.
	Seed int64
	// Faults is the list random faults are drawn from; nil or empty means AllFaults().
	Faults []Fault
	// KeyStatusFaultRate is the probability (0..1) that a status check (idem only) gets 503 with
	// "Retry-After: 0". Drawn from its own source (seeded by Seed), so status checks do not
	// shift the sequence of POST faults.
	KeyStatusFaultRate float64

	// SlowDelay is how long FaultSlow holds a claimed request before executing it; 0 means
	// DefaultSlowDelay, a negative value means no delay.
	SlowDelay time.Duration
	// RetryAfter is the Retry-After, in whole seconds, sent with 503, 429, 409 and 202;
	// 0 means DefaultRetryAfter, a negative value sends "Retry-After: 0".
	RetryAfter int

	// Paths lists the POST endpoints served, each with its own key scope and its dialect's
	// lookups under it (idem: the status endpoint at path+"/operations/{key}" and the search
	// at path); nil means {PaymentsPath}. Add a second path to exercise per-endpoint key
	// scoping.
	Paths []string

	// OnPayment, if set, is called on every POST arrival before anything else (counting,
	// faults, key handling), on the request's goroutine: a hook for tests that inspect
	// client state at the moment a request reaches the server. It must not write a response.
	OnPayment func(r *http.Request)
	// Now is the clock for Execution.At, Retry-After dates, KeyRetention and SearchLag; nil
	// means time.Now. Tests inject a fake clock here to move past a lag or a retention
	// without sleeping.
	Now func() time.Time
}

// withDefaults resolves the documented defaults and panics on an invalid configuration. It
// returns the dialect on idemtest's own key store, nil for idem and ietf.
func (c Config) withDefaults() (Config, *dialect) {
	d := dialectFor(c) // panics on an unknown dialect
	if c.Dialect == "" {
		c.Dialect = DialectIdem
	}
	switch {
	case d != nil:
		c.KeyHeader = d.keyHeader // "" for a body key
	case c.KeyHeader == "":
		c.KeyHeader = DefaultKeyHeader
	}
	switch {
	case c.KeyRetention == 0 && d != nil:
		c.KeyRetention = d.retention
	case c.KeyRetention < 0:
		c.KeyRetention = 0
	}
	switch {
	case c.SearchLag == 0 && d != nil:
		c.SearchLag = d.searchLag
	case c.SearchLag < 0:
		c.SearchLag = 0
	}
	if len(c.Faults) == 0 {
		c.Faults = AllFaults()
	} else {
		c.Faults = append([]Fault(nil), c.Faults...)
	}
	for _, f := range c.Faults {
		if !f.valid() {
			panic(fmt.Sprintf("idemtest: unknown fault %d in Config.Faults", int(f)))
		}
	}
	checkRate("FaultRate", c.FaultRate)
	checkRate("KeyStatusFaultRate", c.KeyStatusFaultRate)
	switch {
	case c.SlowDelay == 0:
		c.SlowDelay = DefaultSlowDelay
	case c.SlowDelay < 0:
		c.SlowDelay = 0
	}
	switch {
	case c.RetryAfter == 0:
		c.RetryAfter = DefaultRetryAfter
	case c.RetryAfter < 0:
		c.RetryAfter = 0
	}
	if len(c.Paths) == 0 {
		c.Paths = []string{PaymentsPath}
	}
	for _, p := range c.Paths {
		if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.ContainsAny(p, "{} ") {
			panic(fmt.Sprintf("idemtest: invalid path %q in Config.Paths", p))
		}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, d
}

// checkRate panics unless rate is a probability.
func checkRate(name string, rate float64) {
	if math.IsNaN(rate) || rate < 0 || rate > 1 {
		panic(fmt.Sprintf("idemtest: Config.%s %v is outside [0, 1]", name, rate))
	}
}

// Handler is the payments API as an http.Handler, usable in any http.Server, with the
// ledger and counters that tests read. In the idem and ietf dialects its POST endpoints run
// behind idemserver's middleware on a memory backend; the other dialects run on idemtest's
// own key store; the faults wrap either. Create it with [NewHandler]; it is safe for
// concurrent use.
type Handler struct {
	cfg       Config
	dialect   *dialect // nil for idem and ietf (on the middleware)
	mux       *http.ServeMux
	backend   *idemserver.Memory
	mw        *idemserver.Middleware // nil unless idem or ietf
	done      chan struct{}          // closed by Close: ends FaultSlow waits
	closeOnce sync.Once

	mu          sync.Mutex
	executions  []Execution
	attemptsFor map[string]int
	stats       Stats
	script      []Fault
	rng         *rand.Rand // POST faults
	statusRng   *rand.Rand // status endpoint faults
	seq         uint64     // arrivals and cancels, in order
	keys        map[keyScope]*keyEntry
	cancels     map[cancelScope]uint64 // the seq of the last cancel of a (tenant, reference)
}

// NewHandler returns a Handler configured by cfg. It panics if cfg is invalid (an unknown
// dialect, see ValidDialect; a rate outside [0, 1], an unknown fault, a malformed path).
func NewHandler(cfg Config) *Handler {
	cfg, d := cfg.withDefaults()
	seed := uint64(cfg.Seed)
	h := &Handler{
		cfg:         cfg,
		dialect:     d,
		keys:        make(map[keyScope]*keyEntry),
		cancels:     make(map[cancelScope]uint64),
		mux:         http.NewServeMux(),
		backend:     idemserver.NewMemory(),
		done:        make(chan struct{}),
		attemptsFor: make(map[string]int),
		stats:       Stats{Faults: make(map[Fault]int)},
		rng:         rand.New(rand.NewPCG(seed, 0x1de0)),
		statusRng:   rand.New(rand.NewPCG(seed, 0x57a7)),
	}
	if d != nil {
		for _, p := range cfg.Paths {
			h.mux.HandleFunc("POST "+p, func(w http.ResponseWriter, r *http.Request) { h.serveDialect(w, r, p) })
		}
		d.routes(h, cfg.Paths)
		return h
	}
	h.mw = h.newMiddleware()
	for _, p := range cfg.Paths {
		pay := h.mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.servePayment(w, r, p) }))
		h.mux.HandleFunc("POST "+p, func(w http.ResponseWriter, r *http.Request) { h.arrive(w, r, pay) })
		if cfg.Dialect == DialectIETF {
			continue // no status endpoint, no search
		}
		status := h.mw.KeyStatusHandler(operation(p), nil)
		h.mux.HandleFunc("GET "+p, func(w http.ResponseWriter, r *http.Request) { h.serveSearch(w, r, p) })
		h.mux.HandleFunc("GET "+p+statusSuffix+"{key}", func(w http.ResponseWriter, r *http.Request) { h.serveStatus(w, r, status) })
	}
	return h
}

// Dialect returns the dialect the handler speaks (Config.Dialect, "" resolved to DialectIdem).
func (h *Handler) Dialect() string { return h.cfg.Dialect }

// Middleware returns the idemserver middleware the POST endpoints run behind, for its
// counters (Stats) and as an example of its configuration; nil for the dialects on
// idemtest's own key store (every dialect but idem and ietf).
func (h *Handler) Middleware() *idemserver.Middleware { return h.mw }

// ServeHTTP routes a request to the payments or the status endpoint.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Close ends every FaultSlow wait at once: those requests release their key, execute
// nothing and answer 503. Later FaultSlow requests do the same. Call it before shutting
// down an http.Server that serves h, so that the shutdown does not wait for SlowDelay.
func (h *Handler) Close() { h.closeOnce.Do(func() { close(h.done) }) }

// Server is a [Handler] served by a running httptest.Server: URL, Client and
// CloseClientConnections come from the embedded httptest.Server, the ledger methods and
// Script from the embedded Handler.
type Server struct {
	*httptest.Server
	*Handler
}

// NewServer starts an httptest.Server (HTTP/1.1 on loopback) serving NewHandler(cfg).
// The caller must Close it.
func NewServer(cfg Config) *Server {
	h := NewHandler(cfg)
	return &Server{Server: httptest.NewServer(h), Handler: h}
}

// Close ends pending FaultSlow waits, then shuts the server down and waits for its
// requests to finish. The ledger stays readable.
func (s *Server) Close() {
	s.Handler.Close()
	s.Server.Close()
}

// retryAfter is the Retry-After header value in seconds.
func (h *Handler) retryAfter() string { return strconv.Itoa(h.cfg.RetryAfter) }

// errorBody is the JSON shape of every error answer.
type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message,omitempty"`
	Param   string `json:"param,omitempty"`
}

// mustJSON encodes v, which is always one of this package's own encodable types.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("idemtest: " + err.Error())
	}
	return b
}

// writeJSON answers status with v as a JSON body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	writeRaw(w, status, "application/json", mustJSON(v))
}

// writeRaw answers status with body and its Content-Type. A failed write (the client hung
// up) is not an error for this server.
func writeRaw(w http.ResponseWriter, status int, contentType string, body []byte) {
	if contentType != "" {
		w.Header().Set("Content-Type", contentType)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
