package idemserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem/internal/wait"
)

// Defaults of Config.
const (
	// DefaultRetention is how long a stored answer is replayed: 24 h, as Stripe keeps keys.
	DefaultRetention = 24 * time.Hour
	// DefaultLease is how long a checkpointed record whose owner is gone stays locked before
	// another request may resume it: 90 s, as in Brandur Leach's Stripe-like keys design. Both
	// backends know when an owner is gone (pgserver: its advisory lock; memory: its claim), so
	// the lease is a cool-down that lets a third-party call the dead owner made settle before
	// the resumed phase repeats it.
	DefaultLease = 90 * time.Second
	// DefaultRetryAfter is the Retry-After sent with 409, 202 and 503 answers (Config.RetryAfter).
	DefaultRetryAfter = time.Second
	// DefaultMaxBodyBytes bounds the request body read for the fingerprint: 1 MiB.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultWaitPoll is how often a waiting request looks at the key again.
	DefaultWaitPoll = 20 * time.Millisecond
	// DefaultKeyHeader is the header the key is read from.
	DefaultKeyHeader = "Idempotency-Key"
	// ReplayedHeader is set to "true" on every replayed answer.
	ReplayedHeader = "Idempotent-Replayed"
)

// DefaultStoredHeaders are the response headers stored and replayed when
// Config.StoredHeaders is nil.
var DefaultStoredHeaders = []string{"Content-Type", "Content-Language", "Content-Encoding", "Location", "ETag", "Last-Modified"}

// credentialHeaders are never stored, whatever the allow-list says.
var credentialHeaders = []string{"Authorization", "Cookie", "Proxy-Authorization", "Set-Cookie", "WWW-Authenticate", "Proxy-Authenticate"}

// ErrInvalidConfig is returned by New for a configuration that cannot work; the message
// names the field.
var ErrInvalidConfig = errors.New("idemserver: invalid config")

// Config configures a Middleware. Backend and Tenant are required.
type Config struct {
	// Backend stores claims and answers (NewMemory, or pgserver). Required.
	Backend Backend
	// Tenant returns the tenant of an authenticated request (an account id from the
	// verified credentials, never a client-chosen header). An error answers 401 and
	// nothing is claimed. Required.
	Tenant func(r *http.Request) (string, error)
	// Operation names the operation; nil means r.Method + " " + r.URL.Path. Give the route
	// pattern when a path carries ids that should not split the key space differently: the
	// path is then fingerprinted with the body, so one key sent to another path is key reuse
	// (422), never a replay of the first path's answer. So is a path escaped otherwise than by
	// default (a%2Fb, which decodes to the Path of a/b that a router may route elsewhere), and
	// the host when the ServeMux pattern that matched names one. A server that routes by host
	// otherwise (the middleware around the whole mux, or another router) names the host in
	// its Operation. At most MaxOperationLength bytes.
	Operation func(r *http.Request) string
	// Required reports whether a request must carry a key (else 400); nil means every
	// request that reaches the middleware (wrap only the unsafe routes). A request without
	// a key that is not required passes through untouched.
	Required func(r *http.Request) bool
	// KeyHeader is the header the key is read from; "" means DefaultKeyHeader.
	KeyHeader string
	// StoredHeaders is the allow-list of response headers stored and replayed; nil means
	// DefaultStoredHeaders. Credential headers are refused (ErrInvalidConfig).
	StoredHeaders []string
	// Retention is how long a stored answer is kept and replayed, counted from the answer; 0
	// means DefaultRetention. Keep it at least the clients' key lifetime (idem's
	// Config.KeyTTL, 24 h by default, counted from the key's creation): a request whose key
	// expired here, purged or not, runs again as a new one.
	Retention time.Duration
	// Lease is how long a checkpointed record whose owner is gone stays locked before a
	// request with the key resumes it (see Checkpoint); 0 means DefaultLease.
	Lease time.Duration
	// RetryAfter is sent (whole seconds, rounded up) with 409, 202 and 503; 0 means
	// DefaultRetryAfter, a negative value sends "Retry-After: 0" (retry at once: for test
	// servers whose clients should not wait).
	RetryAfter time.Duration
	// Wait, if > 0, makes a request whose key is in progress wait up to this long for the
	// first to finish and replay its answer, instead of an immediate 409.
	Wait time.Duration
	// WaitPoll is how often a waiting request looks again; 0 means DefaultWaitPoll.
	WaitPoll time.Duration
	// MaxBodyBytes bounds the request body, in bytes (413 above); 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// ExplicitBegin: execution begins only when the handler calls Begin; an answer written
	// without it is not stored. false (the default): execution begins at handler entry.
	ExplicitBegin bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Sleep waits d or until ctx ends (for Wait polling); nil means a timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// OnEvent, if set, is called synchronously for each Event, sometimes while the request
	// holds its key's claim: a panic in it is recovered and counted (Stats.HookPanics), so
	// that the claim still ends.
	OnEvent func(Event)
	// Fingerprint computes a request's fingerprint from its method, operation (as
	// Config.Operation names it; then a space and the request's escaped path when the
	// operation does not end with the path (a route pattern), when the path was escaped
	// otherwise than by default (a%2Fb), or, preceded by "//" and the Host, when the
	// ServeMux pattern that matched names a host; then "?" and the raw query when the
	// request has one)
	// and body bytes; nil means the package's Fingerprint, over
	// the canonical body (JSON key order and whitespace do not matter). A stricter function,
	// such as SHA-256 over the raw bytes, lets a test server catch clients that do not resend
	// byte-identical bodies. Two requests are the same when their fingerprints are equal.
	Fingerprint func(method, operation string, body []byte) []byte
	// WriteProblem, if set, writes the answers the middleware and the status endpoint give
	// themselves (400, 401, 409, 413, 422, 500 ProblemHandlerFailed, 503), so that they follow
	// the API's own error format; nil means RFC 9457 application/problem+json
	// (WriteProblemJSON). It must answer with status p.Status (a 500 it answers otherwise, or
	// panics on, is rendered by WriteProblemJSON: a stored answer must never read as a
	// success); headers such as Retry-After are already set on w. Clients
	// recognise key reuse when the body names it (idem's client: a string member containing
	// "idempotency", such as the code CodeKeyReused).
	WriteProblem func(w http.ResponseWriter, r *http.Request, p Problem)
}

func (c Config) withDefaults() (Config, error) {
	if c.Backend == nil {
		return c, fmt.Errorf("%w: Backend is nil", ErrInvalidConfig)
	}
	if c.Tenant == nil {
		return c, fmt.Errorf("%w: Tenant is nil (the tenant must come from the authenticated request)", ErrInvalidConfig)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"Retention", &c.Retention, DefaultRetention}, {"Lease", &c.Lease, DefaultLease},
		{"WaitPoll", &c.WaitPoll, DefaultWaitPoll}} {
		if *d.v < 0 {
			return c, fmt.Errorf("%w: %s %v is negative", ErrInvalidConfig, d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	if c.Fingerprint == nil {
		c.Fingerprint = Fingerprint
	}
	if c.Wait < 0 {
		return c, fmt.Errorf("%w: Wait %v is negative", ErrInvalidConfig, c.Wait)
	}
	if c.MaxBodyBytes < 0 {
		return c, fmt.Errorf("%w: MaxBodyBytes %d is negative", ErrInvalidConfig, c.MaxBodyBytes)
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.KeyHeader == "" {
		c.KeyHeader = DefaultKeyHeader
	}
	if c.StoredHeaders == nil {
		c.StoredHeaders = DefaultStoredHeaders
	}
	hs := make([]string, 0, len(c.StoredHeaders))
	for _, h := range c.StoredHeaders {
		h = http.CanonicalHeaderKey(h)
		for _, bad := range credentialHeaders {
			if h == bad {
				return c, fmt.Errorf("%w: StoredHeaders lists %s, a credential", ErrInvalidConfig, h)
			}
		}
		hs = append(hs, h)
	}
	c.StoredHeaders = hs
	if c.Operation == nil {
		c.Operation = new(lastOperation).operation // r.Method + " " + r.URL.Path
	}
	if c.Required == nil {
		c.Required = func(*http.Request) bool { return true }
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Sleep == nil {
		c.Sleep = wait.Sleep
	}
	return c, nil
}
