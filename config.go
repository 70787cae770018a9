package idem

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemkit/idem/event"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
	"github.com/idemkit/idem/profile"
)

// Config and its defaults: what a Client is built from.

// Client defaults.
const (
	defaultKeyHeader = "Idempotency-Key" // IETF Idempotency-Key draft §2
	DefaultKeyTTL    = 24 * time.Hour    // server's key retention window (Stripe keeps keys 24 h)
	defaultRetention = 72 * time.Hour    // how long terminal records stay in the keystore
	// expiredKeySettleDelay is how long after the last request of an expired key
	// (ErrKeyExpired) a business lookup that finds no payment may settle it as not executed:
	// the server may have forgotten the key, so a request still on its way would execute
	// after the search. A lookup that finds the payment settles it at once. A constant: the
	// wait is for a request in flight to land, not a policy to tune.
	expiredKeySettleDelay = time.Minute

	defaultRecoverConcurrency = 16 // records Recover reconciles at once

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
	// outcome.ClassifyStatusCode). Default: a pooled client from go-cleanhttp. idem knows a request
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
	// keystore.NewMemory(), which is NOT durable: a restart or crash loses every pending key,
	// so Recover cannot finish those payments and a new run mints new keys for their intents
	// (a second charge if the first landed). A payment service must set a durable store
	// (keystore/boltstore for one process, keystore/pgstore for a fleet); Memory is for tests
	// and short-lived tools. (Memory drops finished records after Retention, see
	// PurgeInterval.)
	Store keystore.Store
	// Tenant scopes keys locally (WithTenant overrides it per operation). The server scopes
	// keys by its own notion of tenant, usually the credentials. Valid UTF-8, else
	// ErrInvalidConfig; a new record's tenant is at most 255 bytes.
	Tenant string
	// KeyStatusURL is the status endpoint path ("{key}" is replaced by the key, escaped for the
	// path or the query where it stands), such as
	// "/v1/payments/operations/{key}", in the default JSON convention (see KeyStatusFunc and the package docs). Empty:
	// no status endpoint, and an unknown outcome is resent with the same key while the key is
	// younger than KeyTTL.
	KeyStatusURL string
	// KeyStatusFunc replaces the default status check for APIs with another convention.
	KeyStatusFunc outcome.KeyStatusFunc
	// Lookup, if set, is the business lookup: asked about a record the key can tell no more
	// about (a stored 5xx, ErrStoredServerError; or ErrKeyExpired), when a call ends that way,
	// when Do meets such a manual record, and by Recover. A conclusive verdict is persisted
	// (see Resolution) and Do returns the payment found (Result.Source outcome.SourceLookup) or
	// ErrNotExecuted. It is also asked when a resend after an unknown outcome or a status
	// "not found" is refused (a 4xx that is not the key's stored answer): if it finds the
	// payment, the call succeeds (outcome.SourceLookup); otherwise the call ends as the refusal says
	// (ErrOutcomeUnknown, the record pending; ErrPermanent for a 400 after "not found"), since
	// the earlier request may still land after a search that found nothing. For the same
	// reason an expired key is settled as not executed only one minute after its
	// last request; until then it stays manual (ErrKeyExpired) and is asked again by the next
	// Do or Recover.
	// LookupByReference builds one for APIs that search payments by the caller's reference.
	// Nil: such manual records wait for Client.Resolve.
	Lookup LookupFunc
	// KeyHeader is the header carrying the key. Default "Idempotency-Key". It must be a header
	// name that is persisted: a credential header (Authorization, Cookie,
	// Proxy-Authorization, Set-Cookie) or one of SecretHeaders is ErrInvalidConfig.
	KeyHeader string
	// KeyAsSFString sends the key as an RFC 8941 sf-string ("quoted"), as the IETF draft
	// specifies; the default sends the bare token most APIs (Stripe) expect.
	KeyAsSFString bool
	// Policy is the default retry policy; zero fields take the defaults (see Policy).
	Policy Policy
	// Classifiers decide what each attempt means. Default outcome.DefaultClassifiers().
	Classifiers outcome.Classifiers
	// Budget is the client-wide retry budget. The zero value enables it with defaults.
	Budget BudgetConfig
	// Hooks receive events; nil fields are skipped.
	Hooks event.Hooks
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
	// served later from the keystore (outcome.SourceStore) carries null there. The profile's own
	// (Profile.RedactFields) are added. A body that is not JSON is stored as it is. Request
	// bodies are stored as sent. Default: none.
	RedactFields []string
	// KeyTTL is the server's key retention window: a key older than this is never resent,
	// because the server may have forgotten it. Default DefaultKeyTTL (24 hours); negative is
	// ErrInvalidConfig.
	KeyTTL time.Duration
	// Retention is how long succeeded and failed records are kept before Recover, or the
	// background purge (PurgeInterval), removes them. Default 72 hours;
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
	// batch. Close stops it. Default 1 minute; negative disables it.
	PurgeInterval time.Duration
	// PurgeBatch is how many records one purge step examines (and at most deletes) when the
	// store is a keystore.BatchPurger. Default 256; negative is an error.
	PurgeBatch int
	// RecoverConcurrency is how many records Recover reconciles at once. Default
	// 16; negative is ErrInvalidConfig.
	RecoverConcurrency int
	// RecoverBusyRate is the most orphaned records per second a Recover (or the background
	// reclaim of Fleet.ReclaimInterval) starts while Do calls are in flight on the client,
	// so that a large recovery leaves the cores to live calls; with no call in flight it is
	// unpaced, and the pace never stops a recovery. 0 means the default, 6,500: on a 2-core
	// host a recovery of 100,000 records then runs at about 5,500 records/s with a caller's
	// p99 during it about 2.5× its p99 before (4.6× unpaced; docs/PERFORMANCE.md section j).
	// Raise it on a larger host (measure with BenchmarkRecoverExpired, section j); lower it
	// to put the callers' tail first (4,000 there: about 2×, 3,600 records/s); negative
	// means never paced. A rate so low that starting one claimed batch
	// (RecoverConcurrency × 8 records) takes more than a tenth of Fleet.LeaseTTL is
	// ErrInvalidConfig: the batch's leases would run out before its records are sent.
	RecoverBusyRate int
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
	// Fleet is for instances that share one Store (keystore/pgstore) and take over each
	// other's records: owners, leases, orphan reclaim and the clock check. A single process,
	// on Memory or bbolt, leaves it zero.
	Fleet FleetConfig
	// Now is the clock (for tests): record times, lease expiries, Retry-After dates. Default
	// time.Now.
	Now func() time.Time
	// Sleep waits d between attempts (for tests); it must return ctx.Err() promptly when ctx
	// is done. Default: a timer.
	Sleep func(ctx context.Context, d time.Duration) error
}
