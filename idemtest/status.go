package idemtest

import "net/http"

// serveStatus handles GET <path>/operations/{key}: the status-fault draw and the counters,
// then idemserver's status endpoint (next) for the key in the scope (Authorization, path).
// The key may be bare or an RFC 8941 sf-string.
func (h *Handler) serveStatus(w http.ResponseWriter, r *http.Request, next http.Handler) {
	h.mu.Lock()
	h.stats.KeyStatusChecks++
	faulted := h.cfg.KeyStatusFaultRate > 0 && h.statusRng.Float64() < h.cfg.KeyStatusFaultRate
	if faulted {
		h.stats.KeyStatusFaults++
	}
	h.mu.Unlock()
	if faulted {
		w.Header().Set("Retry-After", "0")
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: "service_unavailable"})
		return
	}
	next.ServeHTTP(w, r)
}
