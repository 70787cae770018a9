package idem

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/go-retryablehttp"

	"github.com/idemkit/idem/internal/wait"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

// Client sends operations with idempotency keys, retries them safely and records their
// outcome. It is safe for concurrent use; create one per API and reuse it.
type Client struct {
	cfg        Config
	base       *url.URL
	baseStr    string // base without trailing slashes
	http       *http.Client
	statusHTTP *http.Client
	store      keystore.Store
	policy     Policy
	classes    outcome.Classifiers
	budget     *retryBudget
	locks      keyLocks
	stats      counters
	purger     purger                // background retention purge (purge.go)
	reclaimer  reclaimer             // background orphan reclaim (reclaim.go)
	renewer    renewer               // lease renewal of running calls (fleet.go)
	holds      holds                 // leases kept on records calls left pending, released by Close (fleet.go)
	retrier    *retryablehttp.Client // shared by every call (retrier.go)
	writeClock writeClock            // Do's cached clock check (clockskew.go)
	owner      ownerHold             // this client's count in liveOwners (owners.go)
	dialect    dialect               // what Config.Profile says (dialect.go)
	redact     []string              // response members never stored (Config.RedactFields and the profile's)
	pacerHook  func(*pacer)          // tests only: sees each reclaim pass's pacer (a clock in place of time)
}

// NewClient validates cfg and returns a Client. Errors match ErrInvalidConfig (naming the
// field: a BaseURL that is not absolute or carries user info, a query or a fragment, a
// relative KeyStatusURL without BaseURL, a Retention shorter than KeyTTL, a LeaseTTL not
// longer than Policy.AttemptTimeout, a KeyHeader that is a credential or secret header, a
// negative KeyTTL, Retention, RecoverConcurrency or PurgeBatch, a RecoverBusyRate too low for
// LeaseTTL) or ErrInvalidPolicy. A negative
// PurgeInterval is valid: it disables the background purge.
func NewClient(cfg Config) (*Client, error) {
	c := &Client{cfg: cfg, policy: cfg.Policy.withDefaults()}
	if err := c.policy.validate(); err != nil {
		return nil, err
	}
	if cfg.BaseURL != "" {
		u, err := url.Parse(cfg.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%w: BaseURL %q is not an absolute URL", ErrInvalidConfig, cfg.BaseURL)
		}
		if u.User != nil { // credentials belong in Config.Credentials, never in a URL
			return nil, fmt.Errorf("%w: BaseURL carries user info; use Config.Credentials", ErrInvalidConfig)
		}
		// Relative operation URLs are appended to the base's path; after a query or a fragment
		// they would be sent as query text, or dropped (and fingerprinted unlike their wire form).
		if strings.ContainsAny(cfg.BaseURL, "?#") {
			return nil, fmt.Errorf("%w: BaseURL %q has a query or a fragment; put a query in each operation's URL", ErrInvalidConfig, cfg.BaseURL)
		}
		c.base = u
		c.baseStr = strings.TrimRight(u.String(), "/")
	}
	if err := c.applyProfile(); err != nil {
		return nil, err
	}
	cfg = c.cfg // the profile may have filled KeyHeader, KeyTTL, KeyStatusURL, KeyStatusFunc and Lookup
	if cfg.KeyTTL < 0 || cfg.Retention < 0 || cfg.RecoverConcurrency < 0 {
		return nil, fmt.Errorf("%w: KeyTTL, Retention and RecoverConcurrency must not be negative", ErrInvalidConfig)
	}
	if !utf8.ValidString(cfg.Tenant) { // a keystore could not store it unchanged
		return nil, fmt.Errorf("%w: Tenant is not valid UTF-8", ErrInvalidConfig)
	}
	if cfg.KeyHeader == "" {
		c.cfg.KeyHeader = defaultKeyHeader
	} else if !isToken(cfg.KeyHeader) {
		return nil, fmt.Errorf("%w: KeyHeader %q is not a header name", ErrInvalidConfig, cfg.KeyHeader)
	}
	// A key in a credential or secret header is overwritten by Credentials or never
	// persisted: a restart would mint a new key for a payment that may have been made.
	if isSecretHeader(c.cfg.KeyHeader, keystore.CredentialHeaders) || isSecretHeader(c.cfg.KeyHeader, keystore.ResponseSecretHeaders) {
		return nil, fmt.Errorf("%w: KeyHeader %q is a credential header, which is never persisted", ErrInvalidConfig, c.cfg.KeyHeader)
	}
	if isSecretHeader(c.cfg.KeyHeader, cfg.SecretHeaders) {
		return nil, fmt.Errorf("%w: SecretHeaders names the key header %q, which must be persisted", ErrInvalidConfig, c.cfg.KeyHeader)
	}
	if cfg.KeyStatusURL != "" && !strings.Contains(cfg.KeyStatusURL, "{key}") {
		return nil, fmt.Errorf("%w: KeyStatusURL %q has no {key} placeholder", ErrInvalidConfig, cfg.KeyStatusURL)
	}
	if cfg.KeyStatusURL != "" && c.base == nil {
		if u, err := url.Parse(strings.ReplaceAll(cfg.KeyStatusURL, "{key}", "k")); err != nil || !u.IsAbs() || u.Host == "" {
			return nil, fmt.Errorf("%w: KeyStatusURL %q is relative and BaseURL is empty", ErrInvalidConfig, cfg.KeyStatusURL)
		}
	}
	if cfg.KeyTTL == 0 {
		c.cfg.KeyTTL = DefaultKeyTTL
	}
	if cfg.Retention == 0 {
		c.cfg.Retention = defaultRetention
	}
	if c.cfg.Retention < c.cfg.KeyTTL {
		return nil, fmt.Errorf("%w: Retention %s is shorter than KeyTTL %s: a purged intent would be paid again under a new key while the server still holds the old one",
			ErrInvalidConfig, c.cfg.Retention, c.cfg.KeyTTL)
	}
	if cfg.RecoverConcurrency == 0 {
		c.cfg.RecoverConcurrency = defaultRecoverConcurrency
	}
	if cfg.RecoverBusyRate == 0 {
		c.cfg.RecoverBusyRate = defaultRecoverBusyRate
	}
	if cfg.Now == nil {
		c.cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		c.cfg.Sleep = wait.Sleep
	}
	if err := c.purgeDefaults(); err != nil {
		return nil, err
	}
	if err := c.leaseDefaults(); err != nil {
		return nil, err
	}
	if err := c.checkBusyRate(); err != nil {
		return nil, err
	}
	if err := c.skewDefaults(); err != nil {
		return nil, err
	}
	c.http = cfg.HTTPClient
	if c.http != nil {
		if t, ok := c.http.Transport.(*http.Transport); ok && t == nil { // its RoundTrip panics
			return nil, fmt.Errorf("%w: HTTPClient.Transport is a nil *http.Transport; leave it nil for the default", ErrInvalidConfig)
		}
	}
	if c.http == nil {
		c.http = cleanhttp.DefaultPooledClient()
		// cleanhttp keeps GOMAXPROCS+1 idle connections per host; Recover and busy services
		// run more calls than that at once, and each extra dial (and TLS handshake) is waste.
		c.http.Transport.(*http.Transport).MaxIdleConnsPerHost = max(defaultIdlePerHost, c.cfg.RecoverConcurrency)
	}
	// Status checks never follow redirects either: a 3xx is not the API's answer.
	c.statusHTTP = &http.Client{Transport: c.http.Transport, Jar: c.http.Jar, Timeout: c.http.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	c.retrier = c.newRetrier()
	c.store = cfg.Store
	if c.store == nil {
		c.store = keystore.NewMemory()
	}
	if _, ok := c.store.(keystore.ManualClaimer); c.dialect.lookupActs && !ok {
		return nil, fmt.Errorf("%w: profile %s settles by a cancel by reference, which needs a store that can claim a manual record (keystore.ManualClaimer: Memory, boltstore, pgstore); %T cannot", ErrInvalidConfig, c.dialect.p.Name, c.store)
	}
	c.classes = cfg.Classifiers
	if c.classes == nil {
		c.classes = outcome.DefaultClassifiers()
	}
	if len(c.dialect.p.Rules) > 0 { // the provider's answers are read first
		c.classes = append(outcome.Classifiers{c.profileClassifier()}, c.classes...)
	}
	b, err := newRetryBudget(cfg.Budget)
	if err != nil {
		return nil, err
	}
	c.budget = b
	c.owner.mu.Lock()
	c.holdOwner()
	c.owner.mu.Unlock()
	c.startReclaimer()
	return c, nil
}

// Store returns the keystore the client writes to (nil for a nil Client).
func (c *Client) Store() keystore.Store {
	if c == nil {
		return nil
	}
	return c.store
}

// Now returns the time by the client's clock (Config.Now, time.Now by default): the clock
// its records are stamped and aged with, which an operator's view of them should use too.
func (c *Client) Now() time.Time {
	return c.cfg.Now()
}

// SecretHeaders returns a copy of Config.SecretHeaders: the headers, beside Authorization,
// Cookie and Proxy-Authorization, that the client never persists, and that a view of its
// records should strip again (keystore.StoredCopy) in case something else wrote them.
func (c *Client) SecretHeaders() []string {
	return slices.Clone(c.cfg.SecretHeaders)
}

func (c *Client) settings(opts []CallOption) (callSettings, error) {
	s := callSettings{policy: c.policy, statusURL: c.cfg.KeyStatusURL, status: c.cfg.KeyStatusFunc}
	if len(opts) > 0 { // an option gets a pointer, which moves s to the heap: only then
		o := s
		for _, opt := range opts {
			if opt != nil {
				opt(&o)
			}
		}
		s = o
	}
	if err := s.policy.validate(); err != nil {
		return s, err
	}
	// As NewClient checks the client-wide policy: an attempt must not outlive its lease.
	if s.policy.AttemptTimeout >= c.cfg.Fleet.LeaseTTL {
		return s, fmt.Errorf("%w: AttemptTimeout %s for this call is not shorter than Config.Fleet.LeaseTTL %s: an attempt could outlive the lease and overlap another instance's (shorten the call's attempt timeout or raise Config.Fleet.LeaseTTL)",
			ErrInvalidPolicy, s.policy.AttemptTimeout, c.cfg.Fleet.LeaseTTL)
	}
	if s.status == nil && s.statusURL != "" {
		if !strings.Contains(s.statusURL, "{key}") {
			return s, fmt.Errorf("%w: status URL %q has no {key} placeholder", ErrInvalidConfig, s.statusURL)
		}
		s.status = c.defaultStatus(s.statusURL)
	}
	return s, nil
}

func (c *Client) resolveURL(ref string) (string, error) {
	u, err := url.Parse(ref)
	if err != nil {
		return "", fmt.Errorf("%w: bad URL %q: %w", ErrInvalidOperation, ref, err)
	}
	return c.resolveParsed(ref, u)
}

// resolveParsed is resolveURL of ref already parsed as u; a nil u is a plainPath.
func (c *Client) resolveParsed(ref string, u *url.URL) (string, error) {
	full := ref
	if u == nil || !u.IsAbs() {
		if c.base == nil {
			return "", fmt.Errorf("%w: relative URL %q and no Config.BaseURL", ErrInvalidOperation, ref)
		}
		// The base is a checked absolute http(s) URL and ref parsed: no need to parse again.
		return c.baseStr + "/" + strings.TrimLeft(ref, "/"), nil
	}
	// Anything else can never be sent: refuse it before a record exists.
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%w: URL %q is not http(s) with a host", ErrInvalidOperation, full)
	}
	return full, nil
}
