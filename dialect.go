package idem

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/jsonx"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
	"github.com/idemkit/idem/profile"
)

// A provider's dialect (Config.Profile) is data read here: the key carrier and the
// retention cap at NewClient, the conflict rules as the first classifier, and its settling
// routes as the status check, the business lookup and the pointer fetch that the call
// already runs. decide.go maps each meaning to the call's next step.

// dialect is what NewClient derived from Config.Profile.
type dialect struct {
	p           profile.Profile
	keyField    string        // the key travels in this body member, not in a header
	searchFirst bool          // nothing cached on error: no resend after an unknown outcome before a search said "not there"
	search      LookupFunc    // the search by reference, for searchFirst
	searchRoute profile.Route // its Lag and Landing
	lookupLag   time.Duration // a lookup's "not found" counts only this long after the last send
	lookupActs  bool          // the profile cancels by reference: Config.Lookup acts, asked only of manual records
	actLanding  time.Duration // the cancel goes only this long after the key's last send
	cancelAsync bool          // the cancel's 2xx only accepts it (profile.Route.Async)
}

// retentionMargin is how much shorter than a provider's key retention the KeyTTL a profile
// sets is: a resend that leaves just inside KeyTTL must still arrive, and be executed,
// inside the retention (an attempt's timeout, and a minute for a request still on its way).
func retentionMargin(p Policy) time.Duration {
	return p.AttemptTimeout + profile.DefaultLanding
}

// applyProfile fills the fields Config.Profile speaks for and that the caller left zero, and
// refuses those that contradict it (ErrInvalidConfig).
func (c *Client) applyProfile() error {
	p := c.cfg.Profile
	for _, f := range append(append([]string(nil), c.cfg.RedactFields...), p.RedactFields...) {
		if f == "" || strings.ContainsAny(f, ".[]") {
			return fmt.Errorf("%w: RedactFields names JSON members, at any depth; %q is not a member name (a path would match nothing, and the value would be stored)", ErrInvalidConfig, f)
		}
	}
	if p.Name == "" && (p.KeyHeader != "" || p.KeyField != "" || len(p.Rules) > 0 || len(p.Settle) > 0) {
		return fmt.Errorf("%w: Profile has no Name", ErrInvalidConfig)
	}
	if p.Name == "" {
		c.redact = c.cfg.RedactFields
		return nil
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	d := &c.dialect
	d.p = p.Clone()
	switch {
	case p.KeyField != "":
		if c.cfg.KeyHeader != "" {
			return fmt.Errorf("%w: profile %s sends the key in the body member %q; KeyHeader must be empty", ErrInvalidConfig, p.Name, p.KeyField)
		}
		d.keyField = p.KeyField
	case c.cfg.KeyHeader == "":
		c.cfg.KeyHeader = p.KeyHeader
	case !strings.EqualFold(c.cfg.KeyHeader, p.KeyHeader):
		return fmt.Errorf("%w: KeyHeader %q, but profile %s sends the key in %q", ErrInvalidConfig, c.cfg.KeyHeader, p.Name, p.KeyHeader)
	}
	if p.Retention > 0 {
		// A resend sent just inside KeyTTL must arrive inside the retention.
		ceiling := p.Retention - retentionMargin(c.policy)
		if ceiling <= 0 {
			return fmt.Errorf("%w: %s's key retention of %s leaves no time to resend a key (attempt timeout %s)",
				ErrInvalidConfig, p.Name, p.Retention, c.policy.AttemptTimeout)
		}
		if c.cfg.KeyTTL > ceiling {
			return fmt.Errorf("%w: KeyTTL %s is longer than %s's key retention of %s less %s for a resend to arrive: a key resent after it is a new payment",
				ErrInvalidConfig, c.cfg.KeyTTL, p.Name, p.Retention, retentionMargin(c.policy))
		}
		if c.cfg.KeyTTL == 0 {
			c.cfg.KeyTTL = min(DefaultKeyTTL, ceiling)
		}
	}
	c.redact = append(append([]string(nil), c.cfg.RedactFields...), p.RedactFields...)
	search, hasSearch := p.Route(profile.SearchByReference)
	if hasSearch {
		lk, err := LookupByReference(search.Path, search.Field)
		if err != nil {
			return err
		}
		d.lookupLag = search.Lag
		if c.cfg.Lookup == nil {
			c.cfg.Lookup = lk
		}
		// Where nothing is cached on error, no resend follows an unknown outcome before
		// this search (whatever status route the caller adds): Validate made sure there is
		// one.
		if p.Replay == profile.ReplayNothingOnError {
			d.searchFirst, d.search, d.searchRoute = true, lk, search
		}
	}
	if c.cfg.KeyStatusURL == "" && c.cfg.KeyStatusFunc == nil {
		if r, ok := p.Route(profile.KeyStatus); ok {
			c.cfg.KeyStatusURL = r.Path
		} else if r, ok := p.Route(profile.ListByKey); ok {
			c.cfg.KeyStatusFunc = c.listByKey(r)
		}
	}
	if r, ok := p.Route(profile.ListByKey); ok && c.cfg.Lookup == nil {
		c.cfg.Lookup = c.listByKeyLookup(r)
	}
	if r, ok := p.Route(profile.CancelByReference); ok {
		// A Lookup of the caller's next to a cancel route is taken to act too (it may cancel
		// through LookupRequest.Post): it is asked only of manual records, after the
		// landing, under the record's claim, like the profile's own cancel.
		if c.cfg.Lookup == nil {
			c.cfg.Lookup = cancelByReference(r)
		}
		d.lookupActs, d.cancelAsync = true, r.Async
		d.actLanding = r.Landing
		if d.actLanding == 0 {
			d.actLanding = profile.DefaultLanding
		}
	}
	return nil
}

// profileClassifier classifies by the profile's rules, ahead of the defaults.
func (c *Client) profileClassifier() outcome.Classifier {
	rules := c.dialect.p.Rules
	return outcome.ClassifierFunc(func(a *outcome.Attempt) outcome.Class {
		if a.Response == nil {
			return outcome.ClassUndecided
		}
		for _, r := range rules {
			if r.Matches(a.Response.StatusCode, a.Response.Header, a.Body) {
				return classOf(r.Meaning)
			}
		}
		return outcome.ClassUndecided
	})
}

// checkKeyFor refuses a key the provider would refuse (longer than its maxKeyLength), and
// a body that cannot carry the key (KeyField, on a body that is not a JSON object or already
// holds another key). Errors match ErrInvalidOperation; nothing is persisted or sent.
func (c *Client) checkKeyFor(key string, body []byte) error {
	d := &c.dialect
	if d.p.MaxKeyLength > 0 && len(key) > d.p.MaxKeyLength {
		return fmt.Errorf("%w: idempotency key is %d bytes; %s accepts at most %d", ErrInvalidOperation, len(key), d.p.Name, d.p.MaxKeyLength)
	}
	if d.keyField != "" {
		if _, err := withKeyField(body, d.keyField, key); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOperation, err)
		}
	}
	return nil
}

// withKeyField returns body with "field":"key" as its first member, the rest byte for
// byte, so that every attempt sends the same bytes. A body member of that name is refused
// unless it already holds key (then the body is sent as it is).
func withKeyField(body []byte, field, key string) ([]byte, error) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	var obj map[string]json.RawMessage
	if len(trimmed) == 0 || trimmed[0] != '{' || json.Unmarshal(body, &obj) != nil {
		return nil, fmt.Errorf("the key travels in the body member %q, and the body is not a JSON object", field)
	}
	// A provider that reads the first of two members, or folds case, must see the one key.
	if jsonx.DuplicateMember(body) {
		return nil, errors.New("the body has a member twice (letter case aside); the key's member must be unambiguous")
	}
	for k := range obj {
		if k != field && strings.EqualFold(k, field) {
			return nil, fmt.Errorf("the body has a member %q, a case variant of the key's member %q", k, field)
		}
	}
	if v, ok := obj[field]; ok {
		var s string
		if json.Unmarshal(v, &s) == nil && s == key {
			return body, nil
		}
		return nil, fmt.Errorf("the body already has a %q member other than the key", field)
	}
	name, _ := json.Marshal(field)
	val, _ := json.Marshal(key)
	out := make([]byte, 0, len(body)+len(name)+len(val)+2)
	out = append(out, '{')
	out = append(out, name...)
	out = append(out, ':')
	out = append(out, val...)
	rest := bytes.TrimLeft(trimmed[1:], " \t\r\n")
	if rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, rest...), nil
}

// listByKey is a KeyStatusFunc over a list endpoint filtered by key (Increase): a charge
// listed is the key's answer (200 and the charge), an empty list is "not found", anything
// else says nothing.
func (c *Client) listByKey(r profile.Route) outcome.KeyStatusFunc {
	return func(ctx context.Context, req outcome.KeyStatusRequest) (outcome.KeyStatus, error) {
		path, err := fillPlaceholder(r.Path, "{key}", req.Key)
		if err != nil {
			return outcome.KeyStatus{}, err
		}
		get := c.getter(&keystore.Record{Request: keystore.Request{Header: req.Header}}, req.Header)
		status, body, err := get(ctx, path)
		if err != nil {
			return outcome.KeyStatus{}, err
		}
		var list struct {
			Data []json.RawMessage `json:"data"`
		}
		if status != http.StatusOK || json.Unmarshal(body, &list) != nil || list.Data == nil {
			return outcome.KeyStatus{}, fmt.Errorf("list by key answered HTTP %d without a data list", status)
		}
		if len(list.Data) == 0 {
			return outcome.KeyStatus{State: outcome.KeyStatusNotFound}, nil
		}
		// Only a charge that names this key answers for it: a list whose filter was dropped
		// (a proxy, a renamed parameter) would hand another order's charge to this one.
		for _, item := range list.Data {
			if k, ok := profile.Value(item, "idempotency_key"); ok && k == req.Key {
				return outcome.KeyStatus{State: outcome.KeyStatusCompleted, ResponseStatusCode: http.StatusOK, ResponseBody: item}, nil
			}
		}
		return outcome.KeyStatus{}, fmt.Errorf("list by key listed %d payments, none with idempotency_key %q", len(list.Data), req.Key)
	}
}

// listByKeyLookup is the list by key as the Lookup of a manual record (a stored 5xx): a
// charge listed under the key is the payment; an empty list means not executed.
func (c *Client) listByKeyLookup(r profile.Route) LookupFunc {
	status := c.listByKey(r)
	return func(ctx context.Context, req LookupRequest) (Resolution, error) {
		st, err := status(ctx, outcome.KeyStatusRequest{Key: req.Record.Key, Scope: req.Record.Scope,
			Method: req.Record.Request.Method, URL: req.Record.Request.URL, Header: req.Record.Request.Header.Clone()})
		switch {
		case err != nil:
			return Resolution{}, err
		case st.State == outcome.KeyStatusNotFound:
			return Resolution{Verdict: VerdictNotExecuted, Note: "list by key: no payment under the key"}, nil
		case st.State == outcome.KeyStatusCompleted:
			return Resolution{Verdict: VerdictExecuted, Note: "list by key: a payment under the key",
				Response: &keystore.Response{StatusCode: st.ResponseStatusCode,
					Header: http.Header{"Content-Type": {"application/json"}}, Body: st.ResponseBody}}, nil
		}
		return Resolution{}, errors.New("list by key could not tell")
	}
}

// cancelByReference is a LookupFunc that makes "not executed" definite by canceling every
// charge under the record's reference (Adyen's cancel by paymentReference): a 2xx answer
// is VerdictNotExecuted, anything else VerdictUnknown.
func cancelByReference(r profile.Route) LookupFunc {
	field := r.Field
	if field == "" {
		field = ReferenceField
	}
	return func(ctx context.Context, req LookupRequest) (Resolution, error) {
		ref, err := referenceOf(req.Record, field)
		if err != nil {
			return Resolution{}, err
		}
		q, _ := json.Marshal(ref)
		body := strings.ReplaceAll(r.Body, `"{reference}"`, string(q))
		if req.Post == nil {
			return Resolution{}, errors.New("cancel by reference: this client cannot POST")
		}
		status, _, err := req.Post(ctx, r.Path, []byte(body))
		if err != nil {
			return Resolution{}, err
		}
		if status/100 != 2 {
			return Resolution{}, fmt.Errorf("cancel by reference answered HTTP %d", status)
		}
		return Resolution{Verdict: VerdictNotExecuted,
			Note: fmt.Sprintf("cancel by reference: every charge with %s %q canceled (HTTP %d)", field, ref, status)}, nil
	}
}

// referenceOf reads the caller's reference from the record's request body.
func referenceOf(rec *keystore.Record, field string) (string, error) {
	var body map[string]json.RawMessage
	var ref string
	if json.Unmarshal(rec.Request.Body, &body) != nil || json.Unmarshal(body[field], &ref) != nil || ref == "" {
		return "", fmt.Errorf("the request body has no %q string to look up", field)
	}
	return ref, nil
}
