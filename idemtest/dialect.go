package idemtest

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// The dialect names accepted by Config.Dialect (see the package documentation for what each
// one does on the wire).
const (
	// DialectIdem is idem's own dialect, the default ("" means it too): idemserver's
	// middleware, its status endpoint and the search by reference.
	DialectIdem = "idem"
	// DialectIETF is draft-ietf-httpapi-idempotency-key-header: idemserver's middleware
	// answering application/problem+json, no status endpoint, no search.
	DialectIETF = "ietf"
	// DialectStripe is Stripe's v1 API: stored answers replayed byte for byte (a 500 once
	// execution began included) and a lagging search by metadata.
	DialectStripe = "stripe"
	// DialectStripeV2 is Stripe's v2 APIs: like DialectStripe, but a retry completes the work
	// whose first answer was a 500 and returns the final 2xx.
	DialectStripeV2 = "stripe-v2"
	// DialectAdyen is Adyen's: errorCode 704 conflicts, the transient-error header, no lookup,
	// a cancel by the caller's reference.
	DialectAdyen = "adyen"
	// DialectPayPal is PayPal's: PayPal-Request-Id, a repeat returns the resource as it is
	// now, keys forgotten after 6 h.
	DialectPayPal = "paypal"
	// DialectCheckout is Checkout.com's: Cko-Idempotency-Key, only 2xx answers cached (after a
	// 4xx or 5xx the same key executes again), a consistent list by reference.
	DialectCheckout = "checkout"
	// DialectGoCardless is GoCardless's: a repeat never replays, it is a 409 naming the
	// payment the key created.
	DialectGoCardless = "gocardless"
	// DialectSquare is Square's: the key is the body field idempotency_key; no lookup.
	DialectSquare = "square"
	// DialectIncrease is Increase's: stored answers replayed, 409 with resource_id for another
	// body, a list filtered by idempotency_key.
	DialectIncrease = "increase"
)

// dialectNames is every dialect, in the order of Dialects.
var dialectNames = []string{
	DialectIdem, DialectIETF, DialectStripe, DialectStripeV2, DialectAdyen, DialectPayPal,
	DialectCheckout, DialectGoCardless, DialectSquare, DialectIncrease,
}

// ErrUnknownDialect is matched (errors.Is) by the error ValidDialect returns for a name that
// is not one of Dialects.
var ErrUnknownDialect = errors.New("idemtest: unknown dialect")

// Dialects returns the names Config.Dialect accepts, idem's own first. The caller owns the
// slice.
func Dialects() []string { return slices.Clone(dialectNames) }

// ValidDialect returns nil if name is a dialect Config.Dialect accepts ("" is DialectIdem),
// else an error matching ErrUnknownDialect that lists the known names. Check a name taken
// from a flag with it: NewHandler and NewServer panic on an unknown one.
func ValidDialect(name string) error {
	if name == "" || slices.Contains(dialectNames, name) {
		return nil
	}
	return fmt.Errorf("%w %q (known: %s)", ErrUnknownDialect, name, strings.Join(dialectNames, ", "))
}

// Defaults of the dialects' retention and search lag (Config.KeyRetention, Config.SearchLag).
const (
	// DefaultKeyRetention is how long a dialect on idemtest's own key store remembers a key
	// when Config.KeyRetention is 0 and the provider documents no shorter time (Stripe and
	// Checkout.com document 24 h; GoCardless, Square and Increase publish none).
	DefaultKeyRetention = 24 * time.Hour
	// PayPalKeyRetention is the paypal dialect's default retention: PayPal Orders v2 keeps a
	// PayPal-Request-Id 6 h.
	PayPalKeyRetention = 6 * time.Hour
	// AdyenKeyRetention is the adyen dialect's default retention: the shorter end of the
	// 7 to 14 days reported for Adyen.
	AdyenKeyRetention = 7 * 24 * time.Hour
	// DefaultSearchLag is how long a charge stays invisible to the stripe dialects' search
	// when Config.SearchLag is 0 (Stripe documents up to about a minute; 2 s keeps tests short).
	DefaultSearchLag = 2 * time.Second
)

// keepPolicy is what a dialect keeps under a key once its first execution answered.
type keepPolicy int

const (
	// keepAnswer keeps the stored answer: the 201, or a 500 once execution began.
	keepAnswer keepPolicy = iota
	// keep2xx keeps the key only if the answer sent was a 2xx (a dropped 201 counts).
	keep2xx
	// keepCharge keeps the key only if a charge was made; its record is the charge's 201.
	keepCharge
)

// repeatPolicy is how a dialect answers a completed key sent again with the same request.
type repeatPolicy int

const (
	repeatReplay   repeatPolicy = iota // the stored status, headers and body
	repeatComplete                     // a stored 5xx is completed: charged if need be, 201
	repeatCurrent                      // 200 with the charge as it is now
	repeatPointer                      // 409 naming the charge
)

// dialect is one provider's idempotency semantics on idemtest's own key store (every
// dialect but idem and ietf, which run on idemserver's middleware).
type dialect struct {
	name      string
	keyHeader string // the key's header; "" means the body field keyField
	keyField  string // the body field carrying the key (square)
	keep      keepPolicy
	repeat    repeatPolicy
	replayed  bool // replays carry "Idempotent-Replayed: true"
	checkBody bool // a repeat with another fingerprint is refused (errKeyReused)
	transient bool // answers where nothing executed carry "transient-error: true" (adyen)
	maxKey    int  // the longest key accepted, in bytes; 0 means MaxKeyLength
	retention time.Duration
	searchLag time.Duration
	errs      func(e apiError) (int, any)      // the provider's error format
	routes    func(h *Handler, paths []string) // the settling routes
}

// onMiddleware reports whether the dialect runs on idemserver's middleware.
func onMiddleware(name string) bool { return name == "" || name == DialectIdem || name == DialectIETF }

// dialects are the dialects on idemtest's own key store, by name.
var dialects = map[string]*dialect{
	DialectStripe: {name: DialectStripe, keyHeader: "Idempotency-Key", keep: keepAnswer, repeat: repeatReplay,
		replayed: true, checkBody: true, retention: DefaultKeyRetention, searchLag: DefaultSearchLag,
		errs: stripeError, routes: stripeRoutes},
	DialectStripeV2: {name: DialectStripeV2, keyHeader: "Idempotency-Key", keep: keepAnswer, repeat: repeatComplete,
		replayed: true, checkBody: true, retention: DefaultKeyRetention, searchLag: DefaultSearchLag,
		errs: stripeError, routes: stripeRoutes},
	DialectAdyen: {name: DialectAdyen, keyHeader: "Idempotency-Key", keep: keepAnswer, repeat: repeatReplay,
		checkBody: true, transient: true, retention: AdyenKeyRetention, maxKey: 64, errs: adyenError, routes: adyenRoutes},
	DialectPayPal: {name: DialectPayPal, keyHeader: "PayPal-Request-Id", keep: keepCharge, repeat: repeatCurrent,
		checkBody: true, retention: PayPalKeyRetention, errs: paypalError, routes: fetchRoutes},
	DialectCheckout: {name: DialectCheckout, keyHeader: "Cko-Idempotency-Key", keep: keep2xx, repeat: repeatReplay,
		checkBody: true, retention: DefaultKeyRetention, errs: checkoutError, routes: referenceRoutes},
	DialectGoCardless: {name: DialectGoCardless, keyHeader: "Idempotency-Key", keep: keepCharge, repeat: repeatPointer,
		retention: DefaultKeyRetention, errs: gocardlessError, routes: fetchRoutes},
	DialectSquare: {name: DialectSquare, keyField: "idempotency_key", keep: keepCharge, repeat: repeatReplay,
		checkBody: true, retention: DefaultKeyRetention, maxKey: 45, errs: squareError, routes: func(*Handler, []string) {}},
	DialectIncrease: {name: DialectIncrease, keyHeader: "Idempotency-Key", keep: keepAnswer, repeat: repeatReplay,
		replayed: true, checkBody: true, retention: DefaultKeyRetention, maxKey: 200, errs: increaseError, routes: increaseRoutes},
}

// KeyCarrier returns where dialect name carries the idempotency key: a header name
// ("Idempotency-Key", "PayPal-Request-Id", "Cko-Idempotency-Key"), or "body:idempotency_key"
// for square. Config.KeyHeader, when set, overrides a header carrier. It returns "" for an
// unknown name.
func KeyCarrier(name string) string {
	if onMiddleware(name) {
		return DefaultKeyHeader
	}
	d, ok := dialects[name]
	switch {
	case !ok:
		return ""
	case d.keyHeader == "":
		return "body:" + d.keyField
	}
	return d.keyHeader
}

// TransientErrorHeader is the adyen dialect's header on answers where nothing was executed
// ("transient-error: true": retry later with the same key).
const TransientErrorHeader = "Transient-Error"

// dialectFor returns the dialect on idemtest's own key store named by cfg (nil for idem and
// ietf), with Config.KeyHeader applied. It panics on an unknown name.
func dialectFor(cfg Config) *dialect {
	if err := ValidDialect(cfg.Dialect); err != nil {
		panic(err.Error())
	}
	if onMiddleware(cfg.Dialect) {
		return nil
	}
	d := *dialects[cfg.Dialect]
	if cfg.KeyHeader != "" && d.keyHeader != "" {
		d.keyHeader = http.CanonicalHeaderKey(cfg.KeyHeader)
	}
	return &d
}
