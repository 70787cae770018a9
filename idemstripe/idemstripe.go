package idemstripe

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/profile"
	"github.com/stripe/stripe-go/v82"
)

// KeyHeader is the header Stripe reads the idempotency key from, and the only KeyHeader New
// accepts in Config.Idem.
const KeyHeader = "Idempotency-Key"

// DefaultRedactFields are the response members New always redacts in stored responses:
// client_secret, which lets a browser confirm a PaymentIntent or SetupIntent and must not sit
// in a keystore for Config.Idem.Retention (72 h by default).
var DefaultRedactFields = []string{"client_secret"}

// Config configures New. SecretKey is required; every other field has a default.
type Config struct {
	// SecretKey is the Stripe secret key (sk_...). stripe-go sends it on every request it
	// makes; idem adds it (Authorization: Bearer <key>, through Config.Idem.Credentials) to
	// the requests it sends on its own: resends of a record resumed after a restart (Recover,
	// a Do of a pending intent, the background reclaimer). Never persisted: a record keeps
	// no Authorization header.
	SecretKey string
	// URL is the base URL of Stripe's API backend. Default stripe.APIURL
	// ("https://api.stripe.com"); point it at stripe-mock in tests. The Connect, Uploads and
	// MeterEvents backends keep stripe-go's default URLs (and go through idem too).
	URL string
	// Idem configures the idem client under stripe-go. New sets, whatever they hold:
	// KeyHeader to Idempotency-Key (another value is an error) and BaseURL to URL when
	// empty. Credentials, when nil, adds Authorization: Bearer SecretKey to every request
	// that has none; when set, it runs after that step (to add Stripe-Account, say).
	// RedactFields gets DefaultRedactFields and Config.RedactFields added (see RedactFields).
	// Profile, when zero, becomes profile.Stripe without its search route (KeyTTL at most
	// Stripe's 24 h; see New). Policy.MaxAttempts is the number of sends of one key per call: stripe-go's own retries
	// are off.
	Idem idem.Config
	// RedactFields are JSON member names whose values are replaced by null, at any depth,
	// in the response bodies idem stores (the caller still receives the real body), in
	// addition to DefaultRedactFields. Use it for other one-time secrets (an ephemeral key's
	// "secret", say).
	RedactFields []string
	// LeveledLogger is stripe-go's logger. Default: stripe-go's (errors to stderr).
	LeveledLogger stripe.LeveledLoggerInterface
}

// Client is a Stripe client (the embedded *stripe.Client: c.V1PaymentIntents.Create, ...)
// whose requests all go through idem: POST requests are idem operations (a key persisted
// before the first send, retries under that key, the stored answer on a repeat of an
// intent), GET and DELETE get idem's bounded plain retries. Close it when done.
type Client struct {
	*stripe.Client
	// Backends are the stripe-go backends over idem, for code that uses stripe-go's
	// per-resource clients (paymentintent.Client{B: Backends.API, Key: ...}).
	Backends *stripe.Backends
	// Idem is the idem client: its Store holds the records, Recover resends what a previous
	// process left pending (with the secret key as credentials), Resolve settles a manual one.
	Idem *idem.Client
}

// New returns a Stripe client over a new idem client configured by cfg. stripe-go's own
// retries are off (MaxNetworkRetries 0), so idem's policy alone decides how often a key is
// sent. The idempotency key on the wire is, in this order: the caller's own
// (params.IdempotencyKey, or an Idempotency-Key in params.Headers); the key idem persisted
// for the request's intent (WithIntent or idem.ContextWithIntent on the call's context),
// on every call and after a restart; else a key idem mints. The random key stripe-go mints
// for a POST without params.IdempotencyKey is never sent (it would conflict with the
// intent's persisted key). A caller's key given together with an intent that already has
// another persisted key is refused by idem (ErrKeyConflict, nothing sent). Errors are
// described on Error.
func New(cfg Config) (*Client, error) {
	if cfg.SecretKey == "" {
		return nil, fmt.Errorf("%w: idemstripe: SecretKey is empty", idem.ErrInvalidConfig)
	}
	if cfg.URL == "" {
		cfg.URL = stripe.APIURL
	}
	icfg := cfg.Idem
	if icfg.KeyHeader != "" && !strings.EqualFold(icfg.KeyHeader, KeyHeader) {
		return nil, fmt.Errorf("%w: idemstripe: Idem.KeyHeader %q: Stripe reads the key from %s", idem.ErrInvalidConfig, icfg.KeyHeader, KeyHeader)
	}
	icfg.KeyHeader = KeyHeader
	if icfg.Profile.Name == "" {
		// Stripe's dialect: its 24 h key retention caps KeyTTL, and its conflict answers
		// (idempotency_key_in_use, idempotency_error) are read first. Its search route is
		// left out: stripe-go sends form-encoded bodies, which the search by reference (a
		// JSON body's member) cannot read, so a replayed 500 waits for Resolve.
		p := profile.Stripe.Clone()
		p.Settle = []profile.Route{{Kind: profile.Resend}}
		icfg.Profile = p
	}
	if icfg.BaseURL == "" {
		icfg.BaseURL = strings.TrimRight(cfg.URL, "/")
	}
	icfg.Credentials = bearer(cfg.SecretKey, cfg.Idem.Credentials)
	icfg.RedactFields = redactFields(cfg.Idem.RedactFields, cfg.RedactFields)
	ic, err := idem.NewClient(icfg)
	if err != nil {
		return nil, err
	}
	hc := idem.NewHTTPClient(ic)
	hc.Transport = &keyTransport{next: hc.Transport}
	backends := &stripe.Backends{
		API:         newBackend(stripe.APIBackend, hc, &cfg.URL, cfg.LeveledLogger),
		Connect:     newBackend(stripe.ConnectBackend, hc, nil, cfg.LeveledLogger),
		Uploads:     newBackend(stripe.UploadsBackend, hc, nil, cfg.LeveledLogger),
		MeterEvents: newBackend(stripe.MeterEventsBackend, hc, nil, cfg.LeveledLogger),
	}
	return &Client{
		Client:   stripe.NewClient(cfg.SecretKey, stripe.WithBackends(backends)),
		Backends: backends,
		Idem:     ic,
	}, nil
}

// Close stops the idem client's background work and releases the leases it keeps (see
// idem.Client.Close). It does not close the Store, which the caller owns.
func (c *Client) Close() error {
	if c == nil || c.Idem == nil {
		return nil
	}
	return c.Idem.Close()
}

// WithIntent returns a context whose Stripe calls belong to intent (an order id): the first
// call persists a key for it, every later call with the same intent (in this process or
// after a restart) sends that key, or answers from idem's store once the first has
// finished. It is idem.ContextWithIntent.
func WithIntent(ctx context.Context, intent string) context.Context {
	return idem.ContextWithIntent(ctx, intent)
}

// bearer returns idem's Credentials: Authorization: Bearer key on a request that carries
// none (stripe-go's own requests carry theirs; a resend after a restart has lost it), then
// the caller's own step.
func bearer(key string, next func(*http.Request) error) func(*http.Request) error {
	return func(r *http.Request) error {
		if r.Header.Get("Authorization") == "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		if next != nil {
			return next(r)
		}
		return nil
	}
}

// redactFields joins DefaultRedactFields and the caller's lists, without repeats.
func redactFields(lists ...[]string) []string {
	out := append([]string(nil), DefaultRedactFields...)
	for _, l := range lists {
		for _, f := range l {
			if f != "" && !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out
}
