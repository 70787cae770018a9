package idemserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// statusBody is the JSON of the status endpoint, the convention idem's client reads.
type statusBody struct {
	Status         string          `json:"status"`
	ResponseStatus int             `json:"response_status,omitempty"`
	ResponseBody   json.RawMessage `json:"response_body,omitempty"`
}

type statusHandler struct {
	m         *Middleware
	operation string
	key       func(r *http.Request) string
	// defaultKey: key reads the path value "key", then the key header (nil given)
	defaultKey bool
}

// KeyStatusHandler returns the status endpoint for operation (as Config.Operation names it,
// e.g. "POST /v1/payments"), in the convention of idem's client (DecodeKeyStatus). operation
// must be exactly what Config.Operation returns for the keyed requests, or every key is
// "not_found": with the default (method and path), one status endpoint serves one literal
// path; for routes with ids in the path, let Config.Operation return the route pattern
// (r.Pattern, "POST /v1/accounts/{acct}/payments") and give the same string here. Answers:
// 200 {"status":"completed","response_status":N,"response_body":B},
// 202 {"status":"processing"} with Retry-After, 404 {"status":"not_found"}. B is the stored
// body when it is JSON (compacted and HTML-escaped by encoding/json, so not byte for byte:
// the replay to a request with the key is), else the body as a JSON string (invalid UTF-8
// replaced); an empty body has no response_body. The tenant comes from Config.Tenant
// (401 when it fails), so one tenant never learns of another's keys. key extracts the raw key
// (sf-string or token) from the request; nil means the path value "key" (a ServeMux pattern
// such as "GET /v1/payments/operations/{key}"), else the key header. A missing or invalid key
// gets 400.
func (m *Middleware) KeyStatusHandler(operation string, key func(r *http.Request) string) http.Handler {
	if key != nil {
		return &statusHandler{m: m, operation: operation, key: key}
	}
	key = func(r *http.Request) string {
		if k := r.PathValue("key"); k != "" {
			return k
		}
		return r.Header.Get(m.cfg.KeyHeader)
	}
	return &statusHandler{m: m, operation: operation, key: key, defaultKey: true}
}

func (h *statusHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tenant, err := h.m.cfg.Tenant(r)
	if err != nil {
		h.m.problem(w, r, Problem{Type: ProblemUnauthorized, Title: "Unauthorized", Status: http.StatusUnauthorized})
		return
	}
	raw := h.key(r)
	key, err := ParseKey(raw)
	if err != nil {
		detail := err.Error()
		if raw == "" && h.defaultKey {
			detail = fmt.Sprintf("no key: the route's path value {key} and the %s header are both empty (name the pattern's wildcard {key}, or give KeyStatusHandler a key function)", h.m.cfg.KeyHeader)
		}
		h.m.problem(w, r, Problem{Type: ProblemKeyInvalid, Title: "Invalid Idempotency-Key", Status: http.StatusBadRequest, Detail: detail})
		return
	}
	rec, err := h.m.cfg.Backend.Lookup(r.Context(), Scope{Tenant: tenant, Operation: h.operation, Key: key}, h.m.cfg.Now())
	switch {
	case err != nil:
		w.Header().Set("Retry-After", h.m.retryAfter())
		writeJSON(w, http.StatusServiceUnavailable, statusBody{Status: "unavailable"})
	case rec == nil:
		writeJSON(w, http.StatusNotFound, statusBody{Status: "not_found"})
	case rec.State != StateCompleted:
		w.Header().Set("Retry-After", h.m.retryAfter())
		writeJSON(w, http.StatusAccepted, statusBody{Status: "processing"})
	default:
		var body json.RawMessage // an empty stored body: no response_body member
		switch {
		case json.Valid(rec.Response.Body):
			body = rec.Response.Body
		case len(rec.Response.Body) > 0:
			body, _ = json.Marshal(string(rec.Response.Body))
		}
		writeJSON(w, http.StatusOK, statusBody{Status: "completed", ResponseStatus: rec.Response.StatusCode, ResponseBody: body})
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
