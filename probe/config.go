package probe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/wait"
)

// Defaults of Config.
const (
	// DefaultPath is the POST endpoint probed: the payments convention of this repository.
	DefaultPath = "/v1/payments"
	// DefaultKeyHeader is the idempotency key header sent.
	DefaultKeyHeader = "Idempotency-Key"
	// DefaultConcurrency is how many identical requests the in-progress check sends at once.
	DefaultConcurrency = 8
	// DefaultRounds is how many bursts the in-progress check sends at most, each with a
	// fresh key (one operation each), until one shows an overlap.
	DefaultRounds = 3
	// DefaultTrials is how many payments the trials send, each resent once with its key and
	// counted by the search: 30, the least above trialsFor(DesignRate, DesignPower) = 29, so
	// that an API charging again after 10% of its executions is caught with probability
	// 1-0.9^30 = 95.8%.
	DefaultTrials = 30
	// MaxConcurrency is the most identical requests the in-progress check may send at once:
	// each is a goroutine and a connection held open, and a few hundred already overlap on
	// any server. Config.Concurrency above it is ErrInvalidConfig.
	MaxConcurrency = 1000
	// MaxRounds is the most bursts the in-progress check may send, each a real payment.
	// Config.Rounds above it is ErrInvalidConfig.
	MaxRounds = 100
	// MaxTrials is the most trials a run may send, each a real payment resent once: 10000
	// catch an API charging again after 0.03% of its executions with probability 95%.
	// Config.Trials above it is ErrInvalidConfig.
	MaxTrials = 10000
	// LostEvery: every LostEvery-th trial cuts its own answer (the lost-response scenario):
	// 10 of the default 30.
	LostEvery = 3
	// DefaultRetentionWait is the longest the probe waits to resend a key near the end of
	// the API's advertised retention (Config.Retention): one minute. A longer retention
	// leaves the retention row not observed unless Config.RetentionWait allows the wait.
	DefaultRetentionWait = time.Minute
	// DefaultTimeout bounds each request the probe sends.
	DefaultTimeout = 10 * time.Second
	// KeyStatusSuffix is appended to Path for the default status endpoint (README, "The contract").
	KeyStatusSuffix = "/operations/{key}"
	// ReplayedHeader marks a replayed answer (Stripe's and idemserver's spelling).
	ReplayedHeader = "Idempotent-Replayed"
	// SearchSuffix is appended to Path for the default search by reference.
	SearchSuffix = "?reference={reference}"
)

// ErrNotSandbox is returned by Run when Config.Sandbox is false: the probe creates real
// operations and sends nothing until the caller says the target is a sandbox.
var ErrNotSandbox = errors.New("probe: the target is not declared a sandbox; the probe creates real operations (set Config.Sandbox)")

// ErrUnreachable is returned by Run when no request it sent got an HTTP answer (every one
// met a refused connection, a DNS failure, a timeout or another transport error, each check
// resending at most 5 times): nothing is known about the contract, so there is no report.
// The message names BaseURL, the number of requests and the last transport error.
var ErrUnreachable = errors.New("probe: the API cannot be reached")

// ErrInvalidConfig is returned by Run for a configuration that cannot work; the message
// names the field.
var ErrInvalidConfig = errors.New("probe: invalid config")

// Config says what to probe and how. BaseURL and Sandbox are required.
type Config struct {
	// BaseURL is the API's absolute http(s) URL, such as "https://sandbox.example.com".
	BaseURL string
	// Sandbox must be true: the caller declares that the target is a sandbox where the
	// probe may create operations (payments). Without it Run returns ErrNotSandbox.
	Sandbox bool
	// Path is the POST endpoint; "" means DefaultPath.
	Path string
	// Body returns the JSON body of one operation carrying reference ref; nil means a
	// payment: {"amount":100,"currency":"EUR","customer":"cus_probe","reference":ref}.
	Body func(ref string) []byte
	// OtherBody returns a body that differs from Body(ref), for the key-reuse check; nil
	// means the default payment with amount 101.
	OtherBody func(ref string) []byte
	// KeyHeader is the idempotency key header; "" means DefaultKeyHeader.
	KeyHeader string
	// KeyStatusPath is the status endpoint, relative to BaseURL, with "{key}"; "" means
	// Path+KeyStatusSuffix, and "-" means the API has none (the status rows are NotObserved).
	KeyStatusPath string
	// SearchPath is the search by reference, relative to BaseURL, with "{reference}"; ""
	// means Path+SearchSuffix, "-" means none (executes-once falls back on response ids).
	SearchPath string
	// SearchLag is how long the search may take to list a charge (Stripe's search: about a
	// minute): the probe waits this long after its last payment before counting. 0 means
	// none; a charge the search does not list yet leaves executes-once not observed.
	SearchLag time.Duration
	// Header is sent with every request: credentials, a tenant header. Never stored.
	Header http.Header
	// Concurrency is how many identical requests the in-progress check sends at once; 0
	// means DefaultConcurrency, at most MaxConcurrency.
	Concurrency int
	// Rounds is how many bursts the in-progress check sends at most, each creating one
	// operation; 0 means DefaultRounds, at most MaxRounds.
	Rounds int
	// Trials is how many payments the trials send (each with a fresh key and reference,
	// resent once with the key; every LostEvery-th one with its answer cut by the probe), 0
	// means DefaultTrials, at most MaxTrials. The report's Power says what the number buys.
	Trials int
	// Retention is how long the API says it keeps a key (its documentation, or a header it
	// advertises); 0 means not advertised, and the retention row is not observed. When it is
	// at most RetentionWait, the probe resends a key 90% into it and expects a replay.
	Retention time.Duration
	// RetentionWait is the longest the probe waits for the retention check; 0 means
	// DefaultRetentionWait.
	RetentionWait time.Duration
	// HTTPClient sends the requests; nil means a client with DefaultTimeout.
	HTTPClient *http.Client
	// Now is the clock for Retry-After dates; nil means time.Now.
	Now func() time.Time
	// Sleep waits d between a transient answer (a reset, 429, 5xx, 202 processing) and the
	// next try: the answer's Retry-After, or 200 ms without one. It returns ctx.Err() if ctx
	// ends first. nil means a real timer; tests inject one that returns at once.
	Sleep func(ctx context.Context, d time.Duration) error
}

func (c Config) withDefaults() (Config, error) {
	if !c.Sandbox {
		return c, ErrNotSandbox
	}
	return c.resolve()
}

// resolve checks c and fills the defaults, whatever Sandbox says.
func (c Config) resolve() (Config, error) {
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return c, fmt.Errorf("%w: BaseURL %q is not an absolute http(s) URL", ErrInvalidConfig, c.BaseURL)
	}
	c.BaseURL = strings.TrimRight(c.BaseURL, "/")
	if c.Path == "" {
		c.Path = DefaultPath
	}
	if !strings.HasPrefix(c.Path, "/") {
		return c, fmt.Errorf("%w: Path %q does not start with /", ErrInvalidConfig, c.Path)
	}
	if c.KeyHeader == "" {
		c.KeyHeader = DefaultKeyHeader
	}
	if c.KeyStatusPath == "" {
		c.KeyStatusPath = c.Path + KeyStatusSuffix
	}
	if c.KeyStatusPath != "-" && !strings.Contains(c.KeyStatusPath, "{key}") {
		return c, fmt.Errorf("%w: KeyStatusPath %q has no {key}", ErrInvalidConfig, c.KeyStatusPath)
	}
	if c.SearchPath == "" {
		c.SearchPath = c.Path + SearchSuffix
	}
	if c.SearchPath != "-" && !strings.Contains(c.SearchPath, "{reference}") {
		return c, fmt.Errorf("%w: SearchPath %q has no {reference}", ErrInvalidConfig, c.SearchPath)
	}
	if c.Body == nil {
		c.Body = func(ref string) []byte { return paymentBody(100, ref) }
	}
	if c.OtherBody == nil {
		c.OtherBody = func(ref string) []byte { return paymentBody(101, ref) }
	}
	if c.Concurrency < 0 || c.Concurrency > MaxConcurrency {
		return c, fmt.Errorf("%w: Concurrency %d is outside 0 to %d", ErrInvalidConfig, c.Concurrency, MaxConcurrency)
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Rounds < 0 || c.Rounds > MaxRounds {
		return c, fmt.Errorf("%w: Rounds %d is outside 0 to %d", ErrInvalidConfig, c.Rounds, MaxRounds)
	}
	if c.Rounds == 0 {
		c.Rounds = DefaultRounds
	}
	if c.Trials < 0 || c.Trials > MaxTrials {
		return c, fmt.Errorf("%w: Trials %d is outside 0 to %d", ErrInvalidConfig, c.Trials, MaxTrials)
	}
	if c.Trials == 0 {
		c.Trials = DefaultTrials
	}
	if c.SearchLag < 0 {
		return c, fmt.Errorf("%w: SearchLag %s is negative", ErrInvalidConfig, c.SearchLag)
	}
	if c.Retention < 0 || c.RetentionWait < 0 {
		return c, fmt.Errorf("%w: Retention %s or RetentionWait %s is negative", ErrInvalidConfig, c.Retention, c.RetentionWait)
	}
	if c.RetentionWait == 0 {
		c.RetentionWait = DefaultRetentionWait
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: DefaultTimeout}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Sleep == nil {
		c.Sleep = wait.Sleep
	}
	return c, nil
}

func paymentBody(amount int, ref string) []byte {
	return fmt.Appendf(nil, `{"amount":%d,"currency":"EUR","customer":"cus_probe","reference":%q}`, amount, ref)
}
