package idemtest

import (
	"encoding/json"
	"net/http"
	"strings"
)

// statusBody is the JSON answer of the status endpoint.
type statusBody struct {
	Status         string          `json:"status"` // "completed", "processing" or "not_found"
	ResponseStatus int             `json:"response_status,omitempty"`
	ResponseBody   json.RawMessage `json:"response_body,omitempty"`
}

// serveStatus handles GET <path>/operations/{key}: the state of the key in the scope
// (Authorization, path). The key may be bare or an RFC 8941 sf-string.
func (h *Handler) serveStatus(w http.ResponseWriter, r *http.Request, path string) {
	h.mu.Lock()
	h.stats.StatusChecks++
	faulted := h.cfg.StatusFaultRate > 0 && h.statusRng.Float64() < h.cfg.StatusFaultRate
	if faulted {
		h.stats.StatusFaults++
	}
	h.mu.Unlock()
	if faulted {
		w.Header().Set("Retry-After", "0")
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: "service_unavailable"})
		return
	}

	key := r.PathValue("key")
	if strings.HasPrefix(key, `"`) {
		if s, ok := unquoteSFString(key); ok {
			key = s
		}
	}
	found, done, res := h.lookup(scope{tenant: r.Header.Get("Authorization"), path: path, key: key})
	switch {
	case !found:
		writeJSON(w, http.StatusNotFound, statusBody{Status: "not_found"})
	case !done:
		w.Header().Set("Retry-After", h.retryAfter())
		writeJSON(w, http.StatusAccepted, statusBody{Status: "processing"})
	default:
		writeJSON(w, http.StatusOK, statusBody{Status: "completed", ResponseStatus: res.status, ResponseBody: res.body})
	}
}
