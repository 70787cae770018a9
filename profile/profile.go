// Package profile describes how a payment provider speaks idempotency: where the key
// travels, how long the provider keeps it, what its conflict answers mean, what a repeat of
// the key returns, and how an unknown outcome can be settled. A Profile is data; the idem
// client reads it through one decision table (idem's decide.go) and has no provider-named
// branch. The values in this package follow each provider's public documentation as
// collected in the repository's docs/DIALECTS.md (late 2026); where a provider's current
// documentation says otherwise, it wins: copy the value and change the field.
//
// The paths of the settling routes (Route.Path) follow the project's simulator convention
// (docs/DIALECTS.md, "Convention for simulators and the demo": POST /v1/payments, a search
// at /v1/payments?reference=...), which idemtest serves. Against a provider's real API, copy
// the profile and set each Route.Path to that API's endpoint; a route left at the
// convention's path answers 404 there, which idem reads as "could not tell" (never as "not
// executed"), so payments wait for a person instead of settling. Everything else in a
// profile (key header or field, key length, retention, status and error codes, replay) is
// the provider's own. To set a route's real path:
//
//	p := profile.Stripe.Clone() // a copy: the package's value stays as it is
//	for i := range p.Settle {
//		if p.Settle[i].Kind == profile.SearchByReference {
//			p.Settle[i].Path = "/v1/..." // the provider's search; keep the {reference} placeholder
//		}
//	}
//	// then idem.Config{Profile: p}; p.Validate checks the placeholders
//
// A caller composes its own profile by copying one (Clone) and changing fields, or by
// filling a Profile from scratch; Validate says what is missing.
package profile

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Meaning is what a provider's answer says about the request of a key.
type Meaning int

const (
	// Undecided: the rule has no opinion; the client's default classification decides.
	Undecided Meaning = iota
	// InProgress: the key's first request still runs. Wait (Retry-After or backoff) and
	// ask or resend with the same key; never a failure by itself.
	InProgress
	// KeyReuse: the key was used with another payload. A permanent error naming the key
	// conflict (idem.ErrKeyConflict).
	KeyReuse
	// Done: the key's request already succeeded and the answer names the resource (see
	// Rule.Pointer): fetch it (a FetchPointer route) and return it as the call's answer.
	Done
	// Unknown: the request may have executed. Settle (status, search) before any resend.
	Unknown
	// Retry: the request was not executed. Resend with the same key after the wait.
	Retry
	// StoredError: the provider says a 5xx is final for the key: execution may have begun,
	// its effect is unknown and a resend cannot tell more. The record waits for a settling
	// route (search, cancel) or a person.
	StoredError
)

var meaningNames = [...]string{"undecided", "in-progress", "key-reuse", "done", "unknown", "retry", "stored-error"}

// String returns the meaning's lower-case name.
func (m Meaning) String() string {
	if m >= 0 && int(m) < len(meaningNames) {
		return meaningNames[m]
	}
	return fmt.Sprintf("meaning(%d)", int(m))
}

// Replay is what a repeat of a key returns once its first request has ended.
type Replay int

const (
	// ReplayStored: the first answer, byte for byte, a 5xx included once execution began
	// (Stripe v1, Increase, idem's own contract). A resend after an unknown outcome is safe.
	ReplayStored Replay = iota
	// ReplayCurrent: the resource as it is now (PayPal; Stripe v2 finishes failed or partial
	// work on a retry). A resend after an unknown outcome is safe and answers with the
	// resource.
	ReplayCurrent
	// ReplayPointer: a conflict answer naming the existing resource (GoCardless); a Rule
	// with Meaning Done and a FetchPointer route turn it into the answer.
	ReplayPointer
	// ReplayNothingOnError: only 2xx answers are kept; after a 4xx or 5xx the same key
	// executes again (Checkout.com). A resend after an unknown outcome is a new payment
	// unless a search by reference said the payment is not there: the client never resends
	// before such a search.
	ReplayNothingOnError
)

var replayNames = [...]string{"stored-answer", "current-state", "pointer", "nothing-on-error"}

// String returns the replay model's name.
func (r Replay) String() string {
	if r >= 0 && int(r) < len(replayNames) {
		return replayNames[r]
	}
	return fmt.Sprintf("replay(%d)", int(r))
}

// Rule maps one kind of answer to a Meaning. Every set condition must hold: Status (0: any
// status that is not 2xx), Field and Value (a member of the JSON body at a dotted path; a
// path segment that meets an array is tried on each element), Header and HeaderValue
// (case-insensitive value; HeaderValue "" matches the header's absence). Rules are tried in
// order; the first that matches decides.
type Rule struct {
	Status      int     // HTTP status to match; 0 matches any non-2xx answer
	MinStatus   int     // with MaxStatus, a range of statuses to match instead of Status
	MaxStatus   int     // upper end of the range, inclusive
	Field       string  // dotted path of a JSON member, e.g. "error.type"; "" for no body condition
	Value       string  // the member's value: a string, or a number or boolean as written
	Header      string  // a header name; "" for no header condition
	HeaderValue string  // the header's value; "" matches an absent header
	Meaning     Meaning // what a match means
	// Pointer is the dotted path of the resource id in the body, for Meaning Done
	// ("error.errors.links.conflicting_resource_id" for GoCardless).
	Pointer string
}

// RouteKind is a way to settle an unknown outcome.
type RouteKind int

const (
	// Resend: resend with the same key; the provider's repeat answers for the first request
	// (ReplayStored, ReplayCurrent, ReplayPointer). Never past Retention.
	Resend RouteKind = iota + 1
	// KeyStatus: a status endpoint by key in idem's convention (Route.Path with "{key}").
	KeyStatus
	// SearchByReference: GET Route.Path with "{reference}" answering 200 {"data":[...]};
	// "not found" counts only Route.Lag after the last send (and Route.Landing after a send
	// whose answer never came).
	SearchByReference
	// ListByKey: GET Route.Path with "{key}" answering 200 {"data":[...]}: a charge made
	// under the key, or none.
	ListByKey
	// FetchPointer: GET Route.Path with "{id}" replaced by the id a Done rule's Pointer
	// names.
	FetchPointer
	// CancelByReference: POST Route.Body (with "{reference}") to Route.Path; a 2xx makes
	// "not executed" definite: whatever was charged under the reference is canceled.
	CancelByReference
	// Person: only an operator (idem's Client.Resolve) or a webhook can settle it.
	Person
)

var routeNames = [...]string{"", "resend", "key-status", "search-by-reference", "list-by-key", "fetch-pointer", "cancel-by-reference", "person"}

// String returns the route's name.
func (k RouteKind) String() string {
	if k > 0 && int(k) < len(routeNames) {
		return routeNames[k]
	}
	return fmt.Sprintf("route(%d)", int(k))
}

// Route is one settling route of a profile.
type Route struct {
	Kind RouteKind // how this route settles
	// Path is relative to the client's BaseURL (or absolute), with the placeholder of its
	// kind: "{key}", "{reference}" or "{id}".
	Path string
	// Body is CancelByReference's JSON body, with "{reference}" (a JSON string value).
	Body string
	// Field is the member of the request body holding the caller's reference; "" means
	// "reference".
	Field string
	// Lag is how long the provider's search may take to show a charge (Stripe's search:
	// about a minute). A "not found" counts only Lag after the last send.
	Lag time.Duration
	// Landing is how long a request whose answer never came may still execute at the
	// provider: a search's "not found" counts, and a cancel goes, only Landing after such a
	// send (a cancel only Landing after the key's last send). Zero means DefaultLanding.
	Landing time.Duration
	// Async marks a CancelByReference whose 2xx only accepts the cancel: the provider
	// processes it later and reports its outcome by an event (Adyen answers /cancels with 201
	// {"status":"received"} and sends a TECHNICAL_CANCEL or CANCELLATION notification; a
	// payment already captured is not canceled). The client then keeps the record manual,
	// marked as waiting for that event, and sends no second cancel; the event (package
	// webhook) or a person settles it. False: the 2xx means the charges are canceled, as the
	// simulators of docs/DIALECTS.md do. Only for CancelByReference.
	Async bool
}

// DefaultLanding is how long, by default, a request whose answer never came may still
// execute at the provider (Route.Landing): one minute.
const DefaultLanding = time.Minute

// Profile is one provider's idempotency dialect.
type Profile struct {
	// Name identifies the profile ("stripe", "paypal", ...).
	Name string
	// KeyHeader is the header carrying the key; "" when KeyField carries it.
	KeyHeader string
	// KeyField, if set, is the top-level JSON member of the request body that carries the key
	// (Square's "idempotency_key"); the key is then sent in the body, not in a header, and
	// the request body must be a JSON object.
	KeyField string
	// MaxKeyLength is the longest key the provider accepts, in bytes; 0 means no documented
	// limit (idem's own limit still holds).
	MaxKeyLength int
	// Retention is how long the provider keeps a key; past it, a repeat of the key is a new
	// request. It caps the client's KeyTTL. Zero: not published (the client's KeyTTL stands).
	Retention time.Duration
	// Replay is what a repeat of a key returns.
	Replay Replay
	// Rules map the provider's conflict answers and in-band hints to meanings, tried before
	// the client's default classification.
	Rules []Rule
	// Settle lists the routes that can settle an unknown outcome, in the order they are
	// tried.
	Settle []Route
	// RedactFields are JSON members of the provider's answers never stored (secrets such as
	// a PaymentIntent's client_secret).
	RedactFields []string
	// Sources name the documentation each value follows.
	Sources []string
}

// Clone returns a copy of p that shares no slice with it.
func (p Profile) Clone() Profile {
	p.Rules = append([]Rule(nil), p.Rules...)
	p.Settle = append([]Route(nil), p.Settle...)
	p.RedactFields = append([]string(nil), p.RedactFields...)
	p.Sources = append([]string(nil), p.Sources...)
	return p
}

// ErrInvalid is matched (errors.Is) by every error of Validate and ByName.
var ErrInvalid = errors.New("profile: invalid")

// Validate reports what makes p unusable: no Name; neither or both of KeyHeader and
// KeyField, or a KeyHeader that is not a header token; a negative MaxKeyLength, Retention,
// Lag or Landing; a rule with no condition or an unknown Meaning, a Done rule without
// Pointer; a route of unknown kind or without the placeholder its kind needs; a
// ReplayNothingOnError profile without a SearchByReference route, or with a Resend ahead of
// it (it could never resend safely). Errors match ErrInvalid.
func (p Profile) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalid, p.Name, fmt.Sprintf(format, args...))
	}
	if p.Name == "" {
		return fmt.Errorf("%w: no Name", ErrInvalid)
	}
	if (p.KeyHeader == "") == (p.KeyField == "") {
		return bad("exactly one of KeyHeader and KeyField must be set")
	}
	if p.KeyHeader != "" && http.CanonicalHeaderKey(p.KeyHeader) == "" || strings.ContainsAny(p.KeyHeader, " \t:\r\n") {
		return bad("KeyHeader %q is not a header name", p.KeyHeader)
	}
	if p.MaxKeyLength < 0 || p.Retention < 0 {
		return bad("negative MaxKeyLength or Retention")
	}
	if p.Replay < ReplayStored || p.Replay > ReplayNothingOnError {
		return bad("unknown Replay %d", int(p.Replay))
	}
	for i, r := range p.Rules {
		if r.Status == 0 && r.MinStatus == 0 && r.Field == "" && r.Header == "" {
			return bad("rule %d has no condition", i)
		}
		if r.Meaning <= Undecided || r.Meaning > StoredError {
			return bad("rule %d has no meaning", i)
		}
		if r.Meaning == Done && r.Pointer == "" {
			return bad("rule %d means done but names no Pointer", i)
		}
	}
	searched := false
	for i, rt := range p.Settle {
		if rt.Lag < 0 || rt.Landing < 0 {
			return bad("route %d has a negative Lag or Landing", i)
		}
		if rt.Async && rt.Kind != CancelByReference {
			return bad("route %d is Async, which only a CancelByReference can be", i)
		}
		need := map[RouteKind]string{KeyStatus: "{key}", ListByKey: "{key}", SearchByReference: "{reference}",
			FetchPointer: "{id}", CancelByReference: "{reference}"}[rt.Kind]
		switch {
		case rt.Kind < Resend || rt.Kind > Person:
			return bad("route %d has an unknown kind", i)
		case rt.Kind == CancelByReference && !strings.Contains(rt.Body, need):
			return bad("route %d (%s) has no %s in its Body", i, rt.Kind, need)
		case need != "" && rt.Kind != CancelByReference && !strings.Contains(rt.Path, need):
			return bad("route %d (%s) has no %s in its Path", i, rt.Kind, need)
		case rt.Kind == CancelByReference && rt.Path == "":
			return bad("route %d (%s) has no Path", i, rt.Kind)
		}
		// Where nothing is cached on error, a status or list by key knows nothing of a key
		// whose request charged and then failed: only the search by reference can say "not
		// there".
		if rt.Kind == SearchByReference {
			searched = true
		}
		if rt.Kind == Resend && p.Replay == ReplayNothingOnError && !searched {
			return bad("a resend comes before any search, and a repeat of the key executes again after an error")
		}
	}
	if p.Replay == ReplayNothingOnError && !searched {
		return bad("a repeat of the key executes again after an error, and no search by reference can say the payment is not there")
	}
	return nil
}

// Route returns the first route of kind k, and whether there is one.
func (p Profile) Route(k RouteKind) (Route, bool) {
	for _, r := range p.Settle {
		if r.Kind == k {
			return r, true
		}
	}
	return Route{}, false
}
