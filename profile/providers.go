package profile

import (
	"fmt"
	"sort"
	"time"
)

// Idem is idem's own contract (idemserver, idemtest): a status endpoint by key, stored
// answers replayed, a consistent search by reference. Its route paths are the project's
// convention, which idemtest serves; an API of your own that puts them elsewhere sets them
// on a Clone (see the package doc).
var Idem = Profile{
	Name: "idem", KeyHeader: "Idempotency-Key", Replay: ReplayStored,
	Settle: []Route{
		{Kind: KeyStatus, Path: "/v1/payments/operations/{key}"},
		{Kind: SearchByReference, Path: "/v1/payments?reference={reference}"},
		{Kind: Resend},
	},
	Sources: []string{"draft-ietf-httpapi-idempotency-key-header", "idem DESIGN.md §1"},
}

// IETF is the generic server of the IETF draft (draft-ietf-httpapi-idempotency-key-header
// -07): 409 while a request of the key runs, 422 for the key with another payload, replay
// expected, retention advertised if at all, no status or lookup: an unknown outcome is
// resent with the key, and a key the server can tell no more about waits for a person.
// It has no route with a path: nothing to set against a real server.
var IETF = Profile{
	Name: "ietf", KeyHeader: "Idempotency-Key", Replay: ReplayStored,
	Rules: []Rule{
		{Status: 409, Meaning: InProgress},
		{Status: 422, Meaning: KeyReuse},
	},
	Settle:  []Route{{Kind: Resend}, {Kind: Person}},
	Sources: []string{"draft-ietf-httpapi-idempotency-key-header-07 §2.6"},
}

// Stripe is Stripe's v1 API: keys up to 255 characters, kept at least 24 hours; a repeat
// replays the first answer (a 500 included once execution began, marked
// Idempotent-Replayed); 409 (code idempotency_key_in_use) while the first runs;
// idempotency_error for the key with other parameters (400 per stripe-go; some sources say
// 409); Stripe-Should-Retry hints (idem's default classifiers). No lookup by key: the
// Search API finds a payment by metadata, but may lag about a minute, so "not found" counts
// only a minute after the last send. client_secret is never stored.
//
// Real, from Stripe's documentation: the key header, key length, retention, status and
// error codes, replay and the search's lag. The search route's Path
// (/v1/payments/search?query=...) is the simulator's (docs/DIALECTS.md's convention, served by idemtest), not Stripe's: set it
// to Stripe's endpoint on a Clone (see the package doc), or it answers 404 there and
// payments wait for a person.
var Stripe = Profile{
	Name: "stripe", KeyHeader: "Idempotency-Key", MaxKeyLength: 255, Retention: 24 * time.Hour,
	Replay: ReplayStored,
	Rules: []Rule{
		{Field: "error.code", Value: "idempotency_key_in_use", Meaning: InProgress},
		{Field: "error.type", Value: "idempotency_error", Meaning: KeyReuse},
		{Status: 409, Meaning: InProgress},
	},
	Settle: []Route{
		{Kind: Resend},
		{Kind: SearchByReference, Path: "/v1/payments/search?query=metadata['reference']:'{reference}'", Lag: time.Minute},
	},
	RedactFields: []string{"client_secret"},
	Sources:      []string{"Stripe API reference: Idempotent requests", "Stripe docs: Search (read-after-write lag)", "docs/DIALECTS.md: Stripe (v1)"},
}

// StripeV2 is Stripe's v2 APIs: as Stripe, except that a retry of the key completes failed
// or partial work and returns the final answer instead of replaying a 500. Its search
// route's Path is Stripe's, the simulator's: set it as for Stripe.
var StripeV2 = func() Profile {
	p := Stripe.Clone()
	p.Name, p.Replay = "stripe-v2", ReplayCurrent
	p.Sources = []string{"Stripe docs: API v2 idempotency", "docs/DIALECTS.md: Stripe (v2 APIs)"}
	return p
}()

// Adyen: keys up to 64 characters, kept 7 to 14 days (7 here); a request of a key already
// processed or in progress is answered 409 or 422 with errorCode 704 (wait, same key);
// 503 with errorCode 703 when its idempotency store is down (nothing executed); a 5xx with
// "transient-error: true" may be retried with the same key, its own 500 without it must not
// be (a 502 or 504 of a proxy in front of it keeps the default reading). No
// status API: an unknown outcome is settled by a cancel by the caller's reference, after
// which "not executed" is definite.
//
// Real, from Adyen's documentation: the key header, key length, retention, status and
// errorCode values, the transient-error hint. The cancel route's Path and Body
// (/v1/cancels, {"paymentReference":...}) are the simulator's (docs/DIALECTS.md's convention, served by idemtest), not Adyen's: set it
// to Adyen's endpoint on a Clone (see the package doc), or it answers 404 there and
// payments wait for a person.
var Adyen = Profile{
	Name: "adyen", KeyHeader: "Idempotency-Key", MaxKeyLength: 64, Retention: 7 * 24 * time.Hour,
	Replay: ReplayStored,
	Rules: []Rule{
		{Field: "errorCode", Value: "704", Meaning: InProgress},
		{Status: 503, Field: "errorCode", Value: "703", Meaning: Retry},
		{MinStatus: 500, MaxStatus: 599, Header: "Transient-Error", HeaderValue: "true", Meaning: Unknown},
		// Only Adyen's own 500 says "do not retry" by the header's absence: a 502 or 504 comes
		// from a proxy in front of it, which knows nothing of the header, and may still be
		// forwarding the request (the default classification: unknown, resend the key).
		{Status: 500, Header: "Transient-Error", HeaderValue: "false", Meaning: StoredError},
		{Status: 500, Header: "Transient-Error", Meaning: StoredError},
	},
	Settle: []Route{
		{Kind: Resend},
		// The cancel goes only Landing after the last request of the key: a request still on
		// its way would charge after a cancel that found nothing.
		{Kind: CancelByReference, Path: "/v1/cancels", Body: `{"paymentReference":"{reference}"}`, Async: true},
	},
	Sources: []string{"Adyen docs: API idempotency", "Adyen docs: Cancel (paymentReference)", "docs/DIALECTS.md: Adyen"},
}

// PayPal: the key travels in PayPal-Request-Id and is kept 6 hours (Orders v2; up to 72
// on request: copy the profile and raise Retention only with that agreement); a repeat
// returns the resource as it is now; a key used with another body is
// PAYPAL_REQUEST_ID_PREVIOUSLY_USED (DUPLICATE_REQUEST_ID in older APIs). A resource can
// be fetched only by the id of a 2xx answer, which an unknown outcome lacks: past the
// retention, a person settles it. Everything here is PayPal's own; it has no route with
// a path to set.
var PayPal = Profile{
	Name: "paypal", KeyHeader: "PayPal-Request-Id", Retention: 6 * time.Hour, Replay: ReplayCurrent,
	Rules: []Rule{
		{Field: "details.issue", Value: "PAYPAL_REQUEST_ID_PREVIOUSLY_USED", Meaning: KeyReuse},
		{Field: "name", Value: "DUPLICATE_REQUEST_ID", Meaning: KeyReuse},
	},
	Settle:  []Route{{Kind: Resend}, {Kind: Person}},
	Sources: []string{"PayPal REST API: Idempotency", "docs/DIALECTS.md: PayPal"},
}

// Checkout is Checkout.com: the key travels in Cko-Idempotency-Key and is kept 24 hours;
// 409 while the first request runs; only 2xx answers are kept, so after a 4xx or 5xx the
// same key executes again. An unknown outcome is therefore settled by the search by
// reference first: a charge found is the answer; only "not there" allows the resend.
//
// Real, from Checkout.com's documentation: the key header, retention, status codes, which
// answers are kept. The search route's Path (/v1/payments?reference=...) is the simulator's (docs/DIALECTS.md's convention, served by idemtest), not Checkout.com's: set it
// to Checkout.com's endpoint on a Clone (see the package doc), or it answers 404 there and
// payments wait for a person.
var Checkout = Profile{
	Name: "checkout", KeyHeader: "Cko-Idempotency-Key", Retention: 24 * time.Hour,
	Replay: ReplayNothingOnError,
	Rules:  []Rule{{Status: 409, Meaning: InProgress}},
	Settle: []Route{
		{Kind: SearchByReference, Path: "/v1/payments?reference={reference}"},
		{Kind: Resend},
	},
	Sources: []string{"Checkout.com docs: Idempotency", "Checkout.com API: Get payment details by reference (beta)", "docs/DIALECTS.md: Checkout.com"},
}

// GoCardless: a repeat of a key whose resource was created is not replayed but answered
// 409 invalid_state, reason idempotent_creation_conflict, naming the resource in
// links.conflicting_resource_id; its SDKs fetch that resource, and so does idem.
//
// Real, from GoCardless's documentation: the key header, the 409 and its fields. The fetch
// route's Path (/v1/payments/{id}) is the simulator's (docs/DIALECTS.md's convention, served by idemtest), not GoCardless's: set it
// to GoCardless's endpoint on a Clone (see the package doc), or it answers 404 there and
// payments wait for a person.
var GoCardless = Profile{
	Name: "gocardless", KeyHeader: "Idempotency-Key", Replay: ReplayPointer,
	Rules: []Rule{{Status: 409, Field: "error.errors.reason", Value: "idempotent_creation_conflict",
		Meaning: Done, Pointer: "error.errors.links.conflicting_resource_id"}},
	Settle: []Route{
		{Kind: Resend},
		{Kind: FetchPointer, Path: "/v1/payments/{id}"},
	},
	Sources: []string{"GoCardless API: Idempotency keys", "docs/DIALECTS.md: GoCardless"},
}

// Square: the key is the request body's idempotency_key (at most 45 characters for
// CreatePayment); a repeat returns the first successful answer; a key used with another
// body is IDEMPOTENCY_KEY_REUSED. No lookup by key: a person (or the payment.created
// webhook) settles what a resend cannot. Everything here is Square's own; it has no route
// with a path to set.
var Square = Profile{
	Name: "square", KeyField: "idempotency_key", MaxKeyLength: 45, Replay: ReplayStored,
	Rules:   []Rule{{Field: "errors.code", Value: "IDEMPOTENCY_KEY_REUSED", Meaning: KeyReuse}},
	Settle:  []Route{{Kind: Resend}, {Kind: Person}},
	Sources: []string{"Square API: Idempotency", "Square API: CreatePayment (idempotency_key, max length 45)", "docs/DIALECTS.md: Square"},
}

// Increase: keys up to 200 characters; replays marked Idempotent-Replayed; a key used with
// another body is 409 idempotency_key_already_used_error with the resource_id; every list
// endpoint filters by idempotency_key, which settles an unknown outcome.
//
// Real, from Increase's documentation: the key header, key length, replay marking, the 409
// and its fields, the list filter by idempotency_key. The list route's Path
// (/v1/payments?idempotency_key=...) is the simulator's (docs/DIALECTS.md's convention, served by idemtest), not Increase's: set it
// to Increase's endpoint on a Clone (see the package doc), or it answers 404 there and
// payments wait for a person.
var Increase = Profile{
	Name: "increase", KeyHeader: "Idempotency-Key", MaxKeyLength: 200, Replay: ReplayStored,
	Rules: []Rule{{Field: "type", Value: "idempotency_key_already_used_error", Meaning: KeyReuse}},
	Settle: []Route{
		{Kind: ListByKey, Path: "/v1/payments?idempotency_key={key}"},
		{Kind: Resend},
	},
	Sources: []string{"Increase API: Idempotency keys", "docs/DIALECTS.md: Increase"},
}

// All returns a copy of every profile of this package, by name.
func All() []Profile {
	out := []Profile{Idem.Clone(), IETF.Clone(), Stripe.Clone(), StripeV2.Clone(), Adyen.Clone(), PayPal.Clone(),
		Checkout.Clone(), GoCardless.Clone(), Square.Clone(), Increase.Clone()}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ByName returns a copy of the profile named name. An unknown name matches ErrInvalid and
// lists the names known.
func ByName(name string) (Profile, error) {
	var names []string
	for _, p := range All() {
		if p.Name == name {
			return p, nil
		}
		names = append(names, p.Name)
	}
	return Profile{}, fmt.Errorf("%w: no profile %q (known: %v)", ErrInvalid, name, names)
}
