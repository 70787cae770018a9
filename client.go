package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	"github.com/idemkit/idem/profile"
)

// Client defaults.
const (
	DefaultKeyHeader = "Idempotency-Key" // IETF Idempotency-Key draft §2
	DefaultKeyTTL    = 24 * time.Hour    // server's key retention window (Stripe keeps keys 24 h)
	DefaultRetention = 72 * time.Hour    // how long terminal records stay in the keystore
	// ExpiredKeySettleDelay is how long after the last request of an expired key
	// (ErrKeyExpired) a business lookup that finds no payment may settle it as not executed:
	// the server may have forgotten the key, so a request still on its way would execute
	// after the search. A lookup that finds the payment settles it at once. A constant: the
	// wait is for a request in flight to land, not a policy to tune.
	ExpiredKeySettleDelay = time.Minute

	DefaultRecoverConcurrency = 16 // records Recover reconciles at once

	defaultIdlePerHost = 64 // idle connections per host of the default HTTP client
)

// Config configures a Client. The zero value of every field is a documented default; only
// BaseURL (or absolute operation URLs) is needed.
type Config struct {
	// BaseURL is prefixed to relative operation URLs, e.g. "https://api.example.com". It must
	// not carry user info ("https://user:pass@..."; use Credentials), a query or a fragment
	// (relative URLs are appended to its path): ErrInvalidConfig.
	BaseURL string
	// HTTPClient provides the transport (connection pool, TLS). Its Timeout, if set, also
	// bounds each request (every attempt and status check, not the whole call). Redirects
	// are never followed (a 3xx to an operation is an unknown outcome, see
	// ClassifyStatusCode). Default: a pooled client from go-cleanhttp. idem knows a request
	// never left only when Transport is an *http.Transport whose connection pool was asked
	// for a connection and gave none (httptrace GetConn without GotConn), and whose
	// TLSNextProto holds no handler but net/http's own HTTP/2. Through anything else (a
	// wrapping RoundTripper, an HTTP/3 client, a RoundTripper registered with
	// RegisterProtocol, a TLSNextProto handler of its own) every transport error is an
	// outcome unknown, so the status endpoint is asked before a resend. A nil *http.Transport
	// is ErrInvalidConfig.
	HTTPClient *http.Client
	// Store persists records. Use one Client per store in a process: the lock that keeps two
	// calls of one key from sending at once lives in the Client; across processes sharing a
	// store (keystore/pgstore), the record's lease does (see LeaseTTL). Default:
	// keystore.NewMemory(), which does not survive a restart (finished records are dropped
	// after Retention by the background purge, see PurgeInterval): use it for tests and
	// short-lived processes, and keystore/boltstore for durability.
	Store keystore.Store
	// Tenant scopes keys locally (WithTenant overrides it per operation). The server scopes
	// keys by its own notion of tenant, usually the credentials. Valid UTF-8, else
	// ErrInvalidConfig; a new record's tenant is at most MaxTenantLength bytes.
	Tenant string
	// KeyStatusURL is the status endpoint path ("{key}" is replaced by the key, escaped for the
	// path or the query where it stands), such as
	// "/v1/payments/operations/{key}", in the default JSON convention (see KeyStatusFunc and the package docs). Empty:
	// no status endpoint, and an unknown outcome is resent with the same key while the key is
	// younger than KeyTTL.
	KeyStatusURL string
	// KeyStatusFunc replaces the default status check for APIs with another convention.
	KeyStatusFunc KeyStatusFunc
	// Lookup, if set, is the business lookup: asked about a record the key can tell no more
	// about (a stored 5xx, ErrStoredServerError; or ErrKeyExpired), when a call ends that way,
	// when Do meets such a manual record, and by Recover. A conclusive verdict is persisted
	// (see Resolution) and Do returns the payment found (Result.Source SourceLookup) or
	// ErrNotExecuted. It is also asked when a resend after an unknown outcome or a status
	// "not found" is refused (a 4xx that is not the key's stored answer): if it finds the
	// payment, the call succeeds (SourceLookup); otherwise the call ends as the refusal says
	// (ErrOutcomeUnknown, the record pending; ErrPermanent for a 400 after "not found"), since
	// the earlier request may still land after a search that found nothing. For the same
	// reason an expired key is settled as not executed only ExpiredKeySettleDelay after its
	// last request; until then it stays manual (ErrKeyExpired) and is asked again by the next
	// Do or Recover.
	// LookupByReference builds one for APIs that search payments by the caller's reference.
	// Nil: such manual records wait for Client.Resolve.
	Lookup LookupFunc
	// KeyHeader is the header carrying the key. Default DefaultKeyHeader. It must be a header
	// name that is persisted: a credential header (Authorization, Cookie,
	// Proxy-Authorization, Set-Cookie) or one of SecretHeaders is ErrInvalidConfig.
	KeyHeader string
	// KeyAsSFString sends the key as an RFC 8941 sf-string ("quoted"), as the IETF draft
	// specifies; the default sends the bare token most APIs (Stripe) expect.
	KeyAsSFString bool
	// Policy is the default retry policy; zero fields take the defaults (see Policy).
	Policy Policy
	// Classifiers decide what each attempt means. Default DefaultClassifiers().
	Classifiers Classifiers
	// Budget is the client-wide retry budget. The zero value enables it with defaults.
	Budget BudgetConfig
	// Hooks receive events; nil fields are skipped.
	Hooks Hooks
	// Logger receives debug and warning logs; never bodies or credentials. Nil: no logs.
	Logger *slog.Logger
	// Credentials, if set, is called on every outgoing request (attempts and status checks),
	// whatever its host, to add credentials, which idem never persists: check r.URL.Host if
	// your operations reach several hosts. Needed after a restart, when the persisted request
	// has lost its Authorization header. An error stops the call with ErrInvalidOperation
	// before anything is sent.
	Credentials func(*http.Request) error
	// SecretHeaders are extra header names never persisted (Authorization, Cookie and
	// Proxy-Authorization never are). Such a header given with WithHeader is sent by this
	// process only: a resend after a restart (Recover, or Do of a persisted record) goes
	// without it, unless Credentials adds it. Naming KeyHeader here is ErrInvalidConfig.
	SecretHeaders []string
	// RedactFields names JSON object members, at any depth, whose values are replaced by null
	// in every response body idem stores (a call's answer, a status check's, a lookup's
	// verdict): secrets of a provider's answer, such as a Stripe PaymentIntent's
	// client_secret. The caller of Do still gets the body as the server sent it; an answer
	// served later from the keystore (SourceStore) carries null there. The profile's own
	// (Profile.RedactFields) are added. A body that is not JSON is stored as it is. Request
	// bodies are stored as sent. Default: none.
	RedactFields []string
	// KeyTTL is the server's key retention window: a key older than this is never resent,
	// because the server may have forgotten it. Default DefaultKeyTTL (24 hours); negative is
	// ErrInvalidConfig.
	KeyTTL time.Duration
	// Retention is how long succeeded and failed records are kept before Recover, or the
	// background purge (PurgeInterval), removes them. Default DefaultRetention (72 hours);
	// negative is ErrInvalidConfig, and it must not be
	// shorter than KeyTTL (a purged intent would be paid again under a new key while the
	// server still holds the old one). Pending and manual records are never purged. Age is
	// measured by Now: a clock stepped forward by more than Retention forgets intents early
	// (a later Do of one pays again under a new key). With a store that has a clock
	// (keystore.Clock) MaxClockSkew guards against that; with Memory or bbolt nothing does:
	// keep the host's clock synchronised.
	Retention time.Duration
	// PurgeInterval is how often the client purges records older than Retention while it
	// runs, without Recover: a Do that finds the last pass started PurgeInterval ago (by
	// Config.Now) starts the next one on a background goroutine, which deletes in batches of
	// PurgeBatch records, one short write each, so that no call waits behind more than one
	// batch. Close stops it. Default DefaultPurgeInterval (1 minute); negative disables it.
	PurgeInterval time.Duration
	// PurgeBatch is how many records one purge step examines (and at most deletes) when the
	// store is a keystore.BatchPurger. Default DefaultPurgeBatch (256); negative is an error.
	PurgeBatch int
	// RecoverConcurrency is how many records Recover reconciles at once. Default
	// DefaultRecoverConcurrency (16); negative is ErrInvalidConfig.
	RecoverConcurrency int
	// Owner identifies this client in a fleet of instances sharing one Store (see
	// keystore.Lease): every record it sends holds a lease under this id. It must be unique
	// per running Client; a restarted process must take a new one. Default: host name,
	// process id and 8 random bytes ("host/1234/9f86d081884c7d65"), new for every Client.
	Owner string
	// LeaseTTL is how long a claim on a record lasts without renewal. A call creates its
	// record already claimed (no extra write before the first byte), renews the lease every
	// LeaseTTL/3 while it runs and before every resend. When it ends with the record still
	// pending it keeps the lease for the wait the server asked (Retry-After) or the policy's
	// backoff, at most LeaseTTL, so that no reclaim pass resends it sooner (released at once
	// if the caller canceled or its deadline passed; this client's own Do or Recover takes it
	// at once). Another instance waits for a live lease and takes over the record
	// once it has expired, so a crashed instance's calls are continued after at most LeaseTTL.
	// It must be longer than Policy.AttemptTimeout (ErrInvalidConfig otherwise), so that an
	// attempt never outlives the lease it was sent under. Default DefaultLeaseTTL (30 s).
	LeaseTTL time.Duration
	// ReclaimInterval, if positive, makes the client take over orphaned records in the
	// background every interval: pending records whose lease expired or was released (an
	// instance died, or a call gave up), claimed in batches with keystore.Store.ClaimExpired
	// and reconciled as Recover does, with the default policy. A long-running service thus
	// finishes a dead peer's payments without a restart. Close stops it. Default 0: off (call
	// Recover yourself). Stats.OrphansReclaimed counts the records taken.
	ReclaimInterval time.Duration
	// Profile is the provider's idempotency dialect (package profile: profile.Stripe,
	// profile.PayPal, ..., or one of the caller's own): the key carrier (header or body
	// member) and its length limit, the provider's key retention, which caps KeyTTL (a
	// longer KeyTTL is ErrInvalidConfig naming the provider's figure; zero KeyTTL becomes
	// the smaller of DefaultKeyTTL and the retention), its conflict answers and hints (read
	// ahead of Classifiers), what a repeat of a key returns, its secret response members
	// (added to RedactFields), and its settling routes: a status route or a list by key
	// becomes the status check, a search by reference or a cancel by reference the Lookup
	// (each only where that field is unset), a pointer route is fetched on a "done"
	// answer. Where nothing is cached on error (profile.ReplayNothingOnError), no resend
	// follows an unknown outcome before the search said the payment is not there. The zero
	// value is idem's own contract with nothing assumed: no status endpoint or lookup unless
	// configured. A profile that fails profile.Validate, a Profile without Name, or a
	// KeyHeader contradicting it is ErrInvalidConfig.
	Profile profile.Profile
	// MaxClockSkew bounds how far Now may be from the keystore's clock, when the store has
	// one (keystore.Clock: pgstore, shared by a fleet). Leases and retention are judged by
	// Now, so before every operation that acts on other instances' records on the strength
	// of this clock (a retention purge, in Recover or in the background; a claim of orphans,
	// in Recover or by the background reclaimer; a Do taking over a pending record of another
	// instance, whose lease it judges expired and whose key's age it judges against KeyTTL)
	// the client reads the store's clock, and beyond the bound refuses
	// with ErrClockSkew: Recover returns it, background passes count it
	// (Stats.ClockSkewRefusals) and report it (Logger, Hooks.OnClockSkew), a Do returns it
	// without sending. Do also refuses to create or resume a record (ErrClockSkew, nothing
	// written or sent), since the times it writes are judged by the others' clocks: that
	// check reads the store's clock at most once a minute per Client. Default DefaultMaxClockSkew (5 s), capped at LeaseTTL/3; a larger
	// value is ErrInvalidConfig. Negative disables the check (for tests with injected
	// clocks). Stores without a clock (Memory, bbolt: one process, one clock) are not
	// checked.
	MaxClockSkew time.Duration
	// Now is the clock (for tests): record times, lease expiries, Retry-After dates. Default
	// time.Now.
	Now func() time.Time
	// Sleep waits d between attempts (for tests); it must return ctx.Err() promptly when ctx
	// is done. Default: a timer.
	Sleep func(ctx context.Context, d time.Duration) error
}

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
	classes    Classifiers
	budget     *Budget
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
}

// NewClient validates cfg and returns a Client. Errors match ErrInvalidConfig (naming the
// field: a BaseURL that is not absolute or carries user info, a query or a fragment, a
// relative KeyStatusURL without BaseURL, a Retention shorter than KeyTTL, a LeaseTTL not
// longer than Policy.AttemptTimeout, a KeyHeader that is a credential or secret header, a
// negative KeyTTL, Retention, RecoverConcurrency or PurgeBatch) or ErrInvalidPolicy. A negative
// PurgeInterval is valid: it disables the background purge.
func NewClient(cfg Config) (*Client, error) {
	c := &Client{cfg: cfg, policy: cfg.Policy.withDefaults()}
	if err := c.policy.Validate(); err != nil {
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
		c.cfg.KeyHeader = DefaultKeyHeader
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
		c.cfg.Retention = DefaultRetention
	}
	if c.cfg.Retention < c.cfg.KeyTTL {
		return nil, fmt.Errorf("%w: Retention %s is shorter than KeyTTL %s: a purged intent would be paid again under a new key while the server still holds the old one",
			ErrInvalidConfig, c.cfg.Retention, c.cfg.KeyTTL)
	}
	if cfg.RecoverConcurrency == 0 {
		c.cfg.RecoverConcurrency = DefaultRecoverConcurrency
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
	c.classes = cfg.Classifiers
	if c.classes == nil {
		c.classes = DefaultClassifiers()
	}
	if len(c.dialect.p.Rules) > 0 { // the provider's answers are read first
		c.classes = append(Classifiers{c.profileClassifier()}, c.classes...)
	}
	b, err := NewBudget(cfg.Budget)
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

// Budget returns the client-wide retry budget (nil when disabled, or for a nil Client).
func (c *Client) Budget() *Budget {
	if c == nil {
		return nil
	}
	return c.budget
}

// Source says where a Result came from.
type Source string

const (
	SourceResponse  Source = "response" // the server's answer to an attempt of this call
	SourceReplay    Source = "replay"   // the server replayed a stored answer (Idempotent-Replayed)
	SourceKeyStatus Source = "status"   // the status endpoint reported the stored answer
	SourceStore     Source = "store"    // the keystore already held the final answer
	SourceLookup    Source = "lookup"   // Config.Lookup found the payment after the key could tell no more
)

// SourceHeader is the response header the Transport sets on every answer it returns for an
// operation, to the Result's Source ("response", "replay", "status", "store", "lookup"), so
// that code under a generated client can tell, for example, a 201 from the server from a 200
// that a business lookup found. It is never sent to the server.
const SourceHeader = "Idem-Source"

// KeyResponseHeader is the response header the Transport sets, next to SourceHeader, to the
// operation's idempotency key (Result.Key), so that code under a generated client can log
// the key of a success as well as of an error (OperationError.Key). Never sent to the server.
const KeyResponseHeader = "Idem-Key"

// Result is the final, successful answer for an operation.
type Result struct {
	Key             string      // the idempotency key used
	StatusCode      int         // HTTP status of the operation's answer (2xx)
	Header          http.Header // response headers (nil when the answer came from the status endpoint, or from the keystore and had none worth keeping)
	Body            []byte      // the response body, byte for byte
	Attempts        int         // requests sent in this call (0 when answered from the store)
	KeyStatusChecks int         // status-endpoint asks made in this call
	Source          Source      // where the answer came from
}

// Replayed reports whether the answer was not produced by this call's own request: a
// server replay (SourceReplay), a status-endpoint answer (SourceKeyStatus), the keystore
// (SourceStore) or the business lookup (SourceLookup). Stats.Replays counts only the first
// kind, answers marked Idempotent-Replayed.
func (r *Result) Replayed() bool { return r.Source != SourceResponse }

// Do sends op until it reaches a known state, retrying within the policy (client defaults,
// then opts). The record is persisted before the first byte is sent. It returns the
// successful Result, or an *OperationError matching ErrPermanent, ErrKeyConflict,
// ErrOutcomeUnknown, ErrStoredServerError (with ErrOutcomeUnknown), ErrExhausted,
// ErrRetryAfterTooLong, ErrDeadline, ErrBudgetExhausted, ErrKeyExpired, ErrNotExecuted,
// ErrLeaseLost, ErrClockSkew or ErrCanceled; invalid input gives ErrInvalidOperation (also a nil ctx),
// ErrInvalidPolicy or ErrInvalidConfig (also a nil or zero *Client), and a keystore failure
// before the first send is the store's error wrapped (nothing sent; retry the call). A Create
// that reported an error may have committed, or may still: Do then marks that record failed,
// not executed ("withdrawn"), or takes its key with such a tombstone, so that no Recover
// sends it later. A later Do of the same intent sends the withdrawn record, under its key (the
// intent binds it: retrying the call is safe); one without an intent stays failed and a later
// Do of it returns ErrNotExecuted (its caller may have paid again under a new key meanwhile);
// when it cannot settle the key (the store still failing, another instance holding the
// record), the error names the key and says so, and the caller should continue with the same
// operation (or intent) rather than a new key.
// Only ErrPermanent is a failure of the payment, and ErrNotExecuted the one answer after
// which the application may pay again under a new intent. ErrKeyConflict refuses this
// request without saying what became of the one that holds the key or intent (it may have
// been charged): fix the request, never pay again because of it. After ErrStoredServerError and
// ErrKeyExpired the record is manual (never resent; Config.Lookup or Client.Resolve settles
// it); after the others it stays pending, and a later Do of the same operation or Recover
// finishes it. A second Do of
// the same key (or intent) waits for the first and returns its outcome, never sending
// concurrently; across the instances of a fleet sharing the Store the same holds through
// the record's lease (Config.LeaseTTL): a Do that finds the record claimed by another
// instance waits, bounded by ctx (ErrCanceled, outcome unknown), until the record is final
// (its stored outcome is returned) or the lease expired (the owner died: Do claims the record
// and continues the same key, status endpoint first; a record created later than this
// clock's now by more than twice MaxClockSkew, a clock stepped back, is past KeyTTL as far as Do can
// tell: ErrKeyExpired, never resent; when the store has a clock and this
// client's differs from it by more than Config.MaxClockSkew, Do does not take over another
// instance's record and returns ErrClockSkew, outcome unknown, without sending or writing). A call whose record another
// instance took over stops at once and returns ErrLeaseLost, without sending again or writing.
func (c *Client) Do(ctx context.Context, op *Operation, opts ...CallOption) (*Result, error) {
	if err := checkEntry(c, ctx); err != nil {
		return nil, err
	}
	c.enter()
	defer c.exit()
	u, err := op.check()
	if err != nil {
		return nil, err
	}
	op, err = c.adoptKeyHeader(op)
	if err != nil {
		return nil, err
	}
	if err := c.checkKeyFor(op.key, op.body); err != nil {
		return nil, err
	}
	c.maybePurge()
	s, err := c.settings(opts)
	if err != nil {
		return nil, err
	}
	target, err := c.resolveParsed(op.url, u)
	if err != nil {
		return nil, err
	}
	scope := c.cfg.Tenant
	if op.hasTen {
		scope = op.tenant
	}
	if err := ctx.Err(); err != nil {
		return nil, &OperationError{Key: op.key, Scope: scope, Intent: op.intent, Kind: ErrCanceled, Cause: err}
	}
	if op.intent != "" {
		unlock, waited, err := c.locks.lock(ctx, intentLockName(scope, op.intent))
		if err != nil {
			return nil, &OperationError{Key: op.key, Scope: scope, Intent: op.intent, Kind: ErrCanceled, Cause: err}
		}
		defer unlock.Unlock()
		if waited {
			c.stats.sameKey.Add(1)
		}
	}
	// The key lock is taken before the record is read or created, so that no other call or
	// Recover in this process can send the key between our Create and our first attempt.
	key := op.key
	if op.intent != "" {
		if rec, err := c.getByIntent(ctx, scope, op.intent); err == nil {
			if op.keyBound && rec.Key != op.key { // checked under the intent lock: no race
				return nil, &OperationError{Key: op.key, Scope: scope, Intent: op.intent, Kind: ErrKeyConflict,
					Cause: fmt.Errorf("intent %q is bound to key %q, the request's %s header says %q", op.intent, rec.Key, c.cfg.KeyHeader, op.key)}
			}
			key = rec.Key
		}
	}
	var held heldLock // unlocked when Do returns; one defer outside the loop costs no allocation
	defer func() {
		if held.k != nil {
			held.Unlock()
		}
	}()
	cl := new(call) // holds the record open creates too: one allocation for both
	for try := 0; ; try++ {
		unlock, waited, err := c.locks.lock(ctx, keyLockName(scope, key))
		if err != nil {
			return nil, &OperationError{Key: key, Scope: scope, Intent: op.intent, Kind: ErrCanceled, Cause: err}
		}
		if waited && op.intent == "" {
			c.stats.sameKey.Add(1)
		}
		held = unlock // released by the deferred Unlock, also when a store or clock panics
		rec, created, err := c.open(ctx, op, scope, &cl.own.rec)
		if err != nil { // the deferred Unlock releases the key
			if errors.Is(err, ErrKeyConflict) {
				c.onLocalKeyConflict(err)
			}
			if cerr := ctx.Err(); cerr != nil {
				return nil, &OperationError{Key: key, Scope: scope, Intent: op.intent, Kind: ErrCanceled, Cause: err}
			}
			return nil, err
		}
		if rec.Key != key && try < 3 { // another process bound the intent to its key meanwhile
			held = heldLock{}
			unlock.Unlock()
			key = rec.Key
			continue
		}
		if !created {
			if rec, err = c.resume(ctx, s, rec); err != nil {
				return nil, err
			}
		}
		if !created && rec.State != keystore.StatePending {
			res, err := c.storedOutcome(rec)
			if r, lerr, ok := c.businessLookup(ctx, rec, op.header, err); ok {
				return r, lerr
			}
			return res, err
		}
		return c.initCall(cl, s, rec, op.header, target).run(ctx, !created)
	}
}

// resume brings a record Do found, not created, to where the call can run or return its
// stored outcome: a withdrawn record of the intent is revived (revivable), a pending one is
// leased, waiting while another instance holds a live lease, and one withdrawn while Do
// waited is revived too: it was never sent, and ErrNotExecuted here would let the caller pay
// under a new intent while the intent's own retry sends it. A revival another instance made
// first (ErrFenced) is read again.
func (c *Client) resume(ctx context.Context, s callSettings, rec *keystore.Record) (*keystore.Record, error) {
	for range 3 {
		if revivable(rec) {
			// Resuming writes this clock's times on the record, as creating does (see open).
			if err := c.checkWriteClock(ctx, rec); errors.Is(err, ErrClockSkew) {
				return nil, &OperationError{Key: rec.Key, Scope: rec.Scope, Intent: rec.Intent, Kind: ErrClockSkew, Cause: err}
			}
			if err := c.revive(ctx, rec); errors.Is(err, keystore.ErrFenced) {
				var gerr error
				if rec, gerr = c.get(ctx, rec.Scope, rec.Key); gerr != nil {
					return nil, fmt.Errorf("idem: reading keystore: %w", gerr)
				}
				continue
			} else if err != nil {
				return nil, err
			}
		}
		if rec.State != keystore.StatePending {
			return rec, nil
		}
		if err := c.checkWriteClock(ctx, rec); errors.Is(err, ErrClockSkew) {
			return nil, &OperationError{Key: rec.Key, Scope: rec.Scope, Intent: rec.Intent, Kind: ErrClockSkew,
				Unknown: true, LastStatusCode: rec.LastStatusCode, Cause: err}
		}
		// Another instance may be sending it: take the lease, waiting while it is live.
		var err error
		if rec, err = c.acquire(ctx, s, rec); err != nil {
			return nil, err
		}
		if revivable(rec) { // withdrawn by its creator while we waited
			continue
		}
		// The resend carries the stored request: it must still be the one fingerprinted.
		if rec.State == keystore.StatePending {
			if err := c.checkStoredRequest(rec); err != nil {
				return nil, c.unsendable(ctx, rec, err).Err
			}
		}
		return rec, nil
	}
	return nil, fmt.Errorf("idem: the record of key %q kept changing while Do read it; nothing was sent", rec.Key)
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
	if err := s.policy.Validate(); err != nil {
		return s, err
	}
	// As NewClient checks the client-wide policy: an attempt must not outlive its lease.
	if s.policy.AttemptTimeout >= c.cfg.LeaseTTL {
		return s, fmt.Errorf("%w: AttemptTimeout %s for this call is not shorter than Config.LeaseTTL %s: an attempt could outlive the lease and overlap another instance's (shorten the call's attempt timeout or raise Config.LeaseTTL)",
			ErrInvalidPolicy, s.policy.AttemptTimeout, c.cfg.LeaseTTL)
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
