package idem

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/profile"
)

// getter builds LookupRequest.Get for rec: GET with the operation's headers (header, or the
// persisted ones) and Config.Credentials, no redirects, bounded by the client's
// AttemptTimeout.
func (c *Client) getter(rec *keystore.Record, header http.Header) func(context.Context, string) (int, []byte, error) {
	send := c.sender(rec, header)
	return func(ctx context.Context, path string) (int, []byte, error) {
		return send(ctx, http.MethodGet, path, nil)
	}
}

// poster builds LookupRequest.Post: getter's request as a POST of a JSON body.
func (c *Client) poster(rec *keystore.Record, header http.Header) func(context.Context, string, []byte) (int, []byte, error) {
	send := c.sender(rec, header)
	return func(ctx context.Context, path string, body []byte) (int, []byte, error) {
		return send(ctx, http.MethodPost, path, body)
	}
}

// sender sends one request of a settling route (getter, poster).
func (c *Client) sender(rec *keystore.Record, header http.Header) func(context.Context, string, string, []byte) (int, []byte, error) {
	if header == nil {
		header = rec.Request.Header
	}
	return func(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
		target, err := c.resolveURL(path)
		if err != nil {
			return 0, nil, err
		}
		ctx, cancel := context.WithTimeout(ctx, c.policy.AttemptTimeout)
		defer cancel()
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, target, rd)
		if err != nil {
			return 0, nil, err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, vs := range header {
			if !strings.EqualFold(k, "Content-Type") && !strings.EqualFold(k, "Content-Length") &&
				!strings.EqualFold(k, c.cfg.KeyHeader) {
				req.Header[k] = vs[:len(vs):len(vs)] // shared read-only: an Add by Credentials reallocates
			}
		}
		req.Header.Set("Accept", "application/json")
		if c.cfg.Credentials != nil {
			if err := c.cfg.Credentials(req); err != nil {
				return 0, nil, fmt.Errorf("idem: credentials: %w", err)
			}
		}
		resp, err := c.statusHTTP.Do(req)
		if err != nil {
			return 0, nil, err
		}
		if err := refuseSwitch(resp); err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(io.LimitReader(resp.Body, c.statusBodyLimit(ctx)))
		return resp.StatusCode, got, err
	}
}

// fillPlaceholder replaces every placeholder in tmpl, a path with an optional query, by
// value escaped for where it stands: url.PathEscape in the path, url.QueryEscape in the
// query. One escaping for both would misplace a value: in a path, the "+" QueryEscape makes
// of a space is a plus, so a search for "order 42" would look for "order+42", find nothing,
// and settle a charged payment as not executed.
//
// A value of "." or ".." in the path is refused: url.PathEscape leaves it as it is, and a
// proxy that removes dot segments would send "/v1/payments/by-reference/.." to
// "/v1/payments", a list of every payment, which a search by reference would read as the
// payment found.
func fillPlaceholder(tmpl, placeholder, value string) (string, error) {
	path, query, hasQuery := strings.Cut(tmpl, "?")
	if strings.Contains(path, placeholder) && (value == "." || value == "..") {
		return "", fmt.Errorf("%q cannot stand for %s in a path (a dot segment)", value, placeholder)
	}
	out := strings.ReplaceAll(path, placeholder, url.PathEscape(value))
	if hasQuery {
		out += "?" + strings.ReplaceAll(query, placeholder, url.QueryEscape(value))
	}
	return out, nil
}

// noEffect reports a listed payment whose status says it took no effect: declined, failed,
// canceled (the convention's "canceled"; Checkout.com's "Declined"; Adyen's "Refused").
func noEffect(item []byte) bool {
	s, ok := profile.Value(item, "status")
	if !ok {
		return false
	}
	switch strings.ToLower(s) {
	case "canceled", "cancelled", "declined", "failed", "refused", "rejected", "voided":
		return true
	}
	return false
}

func allNoEffect(items []json.RawMessage) bool {
	for _, it := range items {
		if !noEffect(it) {
			return false
		}
	}
	return true
}

// referenceIn reads a listed payment's reference: the member field, or
// metadata.field (Stripe keeps the caller's reference in metadata).
func referenceIn(item []byte, field string) (string, bool) {
	if r, ok := profile.Value(item, field); ok {
		return r, true
	}
	return profile.Value(item, "metadata."+field)
}

// ReferenceField is the request body member LookupByReference reads by default.
const ReferenceField = "reference"

// LookupByReference returns a LookupFunc for APIs that list payments by the caller's
// reference, the convention of idemtest and of Stripe's search by metadata:
// GET path with "{reference}" replaced by the reference, escaped for where it stands
// (url.PathEscape before the path's "?", url.QueryEscape after it), answering
// 200 {"data":[payment, ...]} (tenant-scoped, oldest first).
//
// The reference is the top-level JSON string member field of the record's request body
// ("" means ReferenceField). A non-empty list means executed, with the first payment as the
// record's answer (status 200); an empty list means not executed; anything else (another
// status, a body it cannot read, a request without a reference) is VerdictUnknown. Use it
// only when the search is consistent with the payments it lists: a search that lags would
// make a charge look absent.
//
// The error matches ErrInvalidConfig when path has no "{reference}".
func LookupByReference(path, field string) (LookupFunc, error) {
	if !strings.Contains(path, "{reference}") {
		return nil, fmt.Errorf("%w: lookup path %q has no {reference} placeholder", ErrInvalidConfig, path)
	}
	if field == "" {
		field = ReferenceField
	}
	return func(ctx context.Context, req LookupRequest) (Resolution, error) {
		ref, err := referenceOf(req.Record, field)
		if err != nil {
			return Resolution{}, err
		}
		target, err := fillPlaceholder(path, "{reference}", ref)
		if err != nil {
			return Resolution{}, err
		}
		status, b, err := req.Get(ctx, target)
		if err != nil {
			return Resolution{}, err
		}
		if status != http.StatusOK {
			return Resolution{}, fmt.Errorf("search by reference answered HTTP %d", status)
		}
		var list struct {
			Data []json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(b, &list); err != nil || list.Data == nil {
			return Resolution{}, errors.New(`search by reference: no "data" list in the answer`)
		}
		if len(list.Data) == 0 {
			return Resolution{Verdict: VerdictNotExecuted, Note: fmt.Sprintf("lookup: no payment with %s %q", field, ref)}, nil
		}
		// A payment that names another reference is not this one: a search whose filter was
		// dropped lists other orders. One that names none is taken as the search's answer.
		found, other := -1, 0
		for i, item := range list.Data {
			if noEffect(item) {
				// A declined or canceled payment took no effect: it is not this intent's
				// charge (it may be an earlier intent's refusal of the same order).
				other++
				continue
			}
			switch r, ok := referenceIn(item, field); {
			case !ok || r == ref:
				if found < 0 {
					found = i
				}
			default:
				other++
			}
		}
		if found < 0 && other == len(list.Data) && allNoEffect(list.Data) {
			return Resolution{Verdict: VerdictNotExecuted, Note: fmt.Sprintf("lookup: %d payment(s) with %s %q, none in effect (declined or canceled)", other, field, ref)}, nil
		}
		if found < 0 {
			return Resolution{}, fmt.Errorf("search by reference listed %d payments, none with %s %q", other, field, ref)
		}
		return Resolution{
			Verdict: VerdictExecuted,
			Response: &keystore.Response{StatusCode: http.StatusOK,
				Header: http.Header{"Content-Type": {"application/json"}}, Body: list.Data[found]},
			Note: fmt.Sprintf("lookup: %d payment(s) with %s %q", len(list.Data)-other, field, ref),
		}, nil
	}, nil
}
