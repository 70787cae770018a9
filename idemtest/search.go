package idemtest

import (
	"net/http"
	"net/url"
)

// SearchPath returns the search-by-reference path for ref under [PaymentsPath], escaped:
// "/v1/payments?reference=" + ref.
func SearchPath(ref string) string {
	return PaymentsPath + "?reference=" + url.QueryEscape(ref)
}

// serveSearch handles GET <path>?reference=R: the tenant's payments (by Authorization) on
// this path with reference R, oldest first (idem and checkout), as 200 {"data":[payment...]}; an empty list when
// there is none. Without a reference: 400. This is the business lookup a client uses when a
// key can tell no more (a stored 500), the pattern of Stripe's search by metadata.
func (h *Handler) serveSearch(w http.ResponseWriter, r *http.Request, path string) {
	q := r.URL.Query()
	refs, ok := q["reference"]
	if !ok || len(refs) != 1 || refs[0] == "" {
		h.badQuery(w, "reference", "exactly one non-empty reference query parameter is required")
		return
	}
	ref := refs[0]
	h.list(w, r, path, func(e *Execution) bool { return e.Reference == ref })
}

// list answers 200 {"data":[payment...]} with the tenant's (Authorization) charges on path
// that match, oldest first, and counts a search.
func (h *Handler) list(w http.ResponseWriter, r *http.Request, path string, match func(*Execution) bool) {
	tenant := r.Header.Get("Authorization")
	h.mu.Lock()
	h.stats.Searches++
	data := []payment{}
	for i := range h.executions {
		if e := &h.executions[i]; e.Tenant == tenant && e.Path == path && match(e) {
			p := paymentOf(e)
			if h.cfg.Dialect == DialectIncrease {
				p.IdempotencyKey = e.Key
			}
			data = append(data, p)
		}
	}
	h.mu.Unlock()
	writeJSON(w, http.StatusOK, struct {
		Data []payment `json:"data"`
	}{data})
}

// badQuery answers a 400 for a lookup's missing or malformed parameter, in the dialect's
// error format.
func (h *Handler) badQuery(w http.ResponseWriter, param, msg string) {
	if h.dialect != nil {
		h.refuse(w, apiError{kind: errInvalidBody, param: param, message: msg})
		return
	}
	h.badRequest(w, http.StatusBadRequest, errorBody{Error: "invalid_request", Param: param, Message: msg})
}
