// Package webhook turns a payment provider's event into a verdict on the idem record it
// names, through the same guarded path as idem's Client.Resolve: only a manual record (one
// the key can tell no more about: a stored 5xx, a key past the provider's retention) is
// settled, a verdict already persisted by another instance or operator stands, and nothing
// is ever resent. It is the settling route of providers that have no lookup (Adyen's
// AUTHORISATION notifications, Square's payment.created): see docs/PROVIDERS.md.
//
// The package imports idem; idem never imports it.
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore"
)

// Event is what a provider's event says about one payment.
type Event struct {
	// Scope is the tenant the record was made under (idem.Config.Tenant).
	Scope string
	// Key is the idempotency key, when the event carries it (Stripe's
	// request.idempotency_key). Either Key or Reference must be set.
	Key string
	// Reference is the caller's reference, when the event carries it instead of the key
	// (Adyen's merchantReference): the manual records of Scope whose request body has it in
	// ReferenceField are settled. Only a VerdictExecuted event may name a reference alone, and
	// only while one record of Scope has it (an order tried under several intents needs the
	// key). Settle then lists the keystore's records: a webhook's cost grows with the store.
	Reference string
	// ReferenceField is the request body member holding the reference; "" means
	// idem.ReferenceField ("reference").
	ReferenceField string
	// Verdict is what the event proves: idem.VerdictExecuted (the payment exists) or
	// idem.VerdictNotExecuted (the provider refused or canceled it).
	Verdict idem.Verdict
	// Response is the payment the event carries, kept as the record's answer for
	// VerdictExecuted (a 2xx; nil means an empty 200).
	Response *keystore.Response
	// Note is kept on the record: which event settled it.
	Note string
	// CancelRefused marks an event that reports the provider's refusal of a cancel by
	// reference idem sent for the record (Adyen's TECHNICAL_CANCEL or CANCELLATION with
	// success "false"): with VerdictExecuted, the payment stands (idem.Resolution.CancelRefused).
	// A cancel's success is VerdictNotExecuted, by Key.
	CancelRefused bool
}

// ErrNoRecord is returned (wrapped) by Settle when no record of the event's scope has its
// key or reference: a payment idem did not make, or one already purged.
var ErrNoRecord = errors.New("webhook: no record for the event")

// ErrStillPending is returned (wrapped, with idem.ErrNotManual) by Settle when the record
// is pending: a call or Recover still works on it, and the provider should deliver the event
// again later.
var ErrStillPending = errors.New("webhook: the record is still pending")

// Settle gives the event's verdict to the manual record it names (by Key, or the one record
// of Scope with Reference), with idem.Client.Resolve, and returns the record settled.
// Errors: ErrNoRecord when nothing matches; an *idem.OperationError matching
// idem.ErrNotManual when the record is succeeded or failed (a verdict stands), also
// matching ErrStillPending when it is pending; an *idem.OperationError matching
// idem.ErrCancelInFlight while a cancel by reference sent for the record may still land
// (Handler answers both with 409, so that the provider delivers the event again later);
// idem.ErrInvalidOperation for an event with neither Key nor Reference, idem.VerdictUnknown,
// a not-executed event without Key, or a Reference that several records have; a keystore
// error.
func Settle(ctx context.Context, c *idem.Client, ev Event) ([]*keystore.Record, error) {
	if ev.Key == "" && ev.Reference == "" {
		return nil, fmt.Errorf("%w: the event names neither a key nor a reference", idem.ErrInvalidOperation)
	}
	if ev.Verdict != idem.VerdictExecuted && ev.Verdict != idem.VerdictNotExecuted {
		return nil, fmt.Errorf("%w: the event's verdict is %s", idem.ErrInvalidOperation, ev.Verdict)
	}
	// An order is paid under several intents (a refusal, then a new try): an event about one
	// of them, late or redelivered, says nothing of another. "Executed" by reference is
	// safe (a charge with the reference exists); "not executed" needs the key.
	if ev.Verdict == idem.VerdictNotExecuted && ev.Key == "" {
		return nil, fmt.Errorf("%w: a not-executed event must name the key: by reference it could settle another attempt of the same order", idem.ErrInvalidOperation)
	}
	r := idem.Resolution{Verdict: ev.Verdict, Response: ev.Response, Note: ev.Note, CancelRefused: ev.CancelRefused}
	if r.Note == "" {
		r.Note = "webhook: " + ev.Verdict.String()
	}
	if ev.Key != "" {
		rec, err := c.Resolve(ctx, ev.Scope, ev.Key, r)
		if errors.Is(err, keystore.ErrNotFound) {
			return nil, fmt.Errorf("%w: key %q: %w", ErrNoRecord, ev.Key, err)
		}
		if err != nil {
			return nil, pendingErr(ctx, c, ev.Scope, ev.Key, err)
		}
		return []*keystore.Record{rec}, nil
	}
	field := ev.ReferenceField
	if field == "" {
		field = idem.ReferenceField
	}
	// Every record of the reference, whatever its state: an order paid under several intents
	// (a refusal or a cancel, then a new try) makes the reference ambiguous, and an event
	// about one intent, late or redelivered, must not settle another.
	all, err := c.Store().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("webhook: listing records: %w", err)
	}
	var match []*keystore.Record
	for _, rec := range all {
		if rec.Scope == ev.Scope && referenceOf(rec.Request.Body, field) == ev.Reference {
			match = append(match, rec)
		}
	}
	switch {
	case len(match) == 0:
		return nil, fmt.Errorf("%w: no record of tenant %q has %s %q", ErrNoRecord, ev.Scope, field, ev.Reference)
	case len(match) > 1:
		return nil, fmt.Errorf("%w: %d records of tenant %q have %s %q (several intents of one order): the event must name the key", idem.ErrInvalidOperation, len(match), ev.Scope, field, ev.Reference)
	}
	got, err := c.Resolve(ctx, match[0].Scope, match[0].Key, r)
	if err != nil {
		return nil, pendingErr(ctx, c, match[0].Scope, match[0].Key, err)
	}
	return []*keystore.Record{got}, nil
}

// pendingErr adds ErrStillPending to a refusal of a record that is pending now.
func pendingErr(ctx context.Context, c *idem.Client, scope, key string, err error) error {
	if !errors.Is(err, idem.ErrNotManual) {
		return err
	}
	if rec, gerr := c.Store().Get(ctx, scope, key); gerr == nil && rec.State == keystore.StatePending {
		return fmt.Errorf("%w: %w", ErrStillPending, err)
	}
	return err
}

func referenceOf(body []byte, field string) string {
	var m map[string]json.RawMessage
	var ref string
	if json.Unmarshal(body, &m) != nil || json.Unmarshal(m[field], &ref) != nil {
		return ""
	}
	return ref
}

// MaxEventSize is the largest event body Handler reads, in bytes (1 MiB).
const MaxEventSize = 1 << 20

// Handler is an http.Handler for a provider's webhook: it verifies the request, parses the
// event and settles the record it names (Settle). Answers: 200 when settled; 202 when no
// record matches (a payment idem did not make: nothing to retry); 409 when the record is
// still pending or a cancel by reference sent for it may still land (the provider delivers
// again later); 200 when it was settled already (the
// first verdict stands; the event is acknowledged); 400 for an event Parse refuses; 401
// when Verify refuses, or when Verify is nil (every request is refused: a webhook that
// settles payments must check the provider's signature); 405 for a method other than POST;
// 413 past MaxEventSize; 500 when the keystore fails.
type Handler struct {
	// Client is the idem client whose records the events settle.
	Client *idem.Client
	// Verify checks the request's authenticity (the provider's HMAC signature over body);
	// nil refuses every request.
	Verify func(r *http.Request, body []byte) error
	// Parse turns the body into an Event; an error answers 400.
	Parse func(body []byte) (Event, error)
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxEventSize+1))
	if err != nil {
		http.Error(w, "reading the event", http.StatusBadRequest)
		return
	}
	if len(body) > MaxEventSize {
		http.Error(w, "event too large", http.StatusRequestEntityTooLarge)
		return
	}
	if h.Verify == nil {
		http.Error(w, "no verification configured: every event is refused", http.StatusUnauthorized)
		return
	}
	if err := h.Verify(r, body); err != nil {
		http.Error(w, "event not verified", http.StatusUnauthorized)
		return
	}
	if h.Parse == nil || h.Client == nil {
		http.Error(w, "handler not configured", http.StatusInternalServerError)
		return
	}
	ev, err := h.Parse(body)
	if err != nil {
		http.Error(w, "event not understood: "+clip(err.Error()), http.StatusBadRequest)
		return
	}
	_, err = Settle(r.Context(), h.Client, ev)
	switch {
	case err == nil:
		w.WriteHeader(http.StatusOK)
	case errors.Is(err, ErrNoRecord):
		w.WriteHeader(http.StatusAccepted)
	case errors.Is(err, idem.ErrInvalidOperation):
		http.Error(w, clip(err.Error()), http.StatusBadRequest)
	case errors.Is(err, ErrStillPending), errors.Is(err, idem.ErrCancelInFlight):
		http.Error(w, "the payment is still being worked on: deliver again later", http.StatusConflict)
	case errors.Is(err, idem.ErrNotManual):
		w.WriteHeader(http.StatusOK) // already settled: the first verdict stands
	default:
		http.Error(w, "settling failed", http.StatusInternalServerError)
	}
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
