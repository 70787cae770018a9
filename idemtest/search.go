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
// this path with reference R, oldest first, as 200 {"data":[payment...]}; an empty list when
// there is none. Without a reference: 400. This is the business lookup a client uses when a
// key can tell no more (a stored 500), the pattern of Stripe's search by metadata.
func (h *Handler) serveSearch(w http.ResponseWriter, r *http.Request, path string) {
	q := r.URL.Query()
	refs, ok := q["reference"]
	if !ok || len(refs) != 1 || refs[0] == "" {
		h.badRequest(w, http.StatusBadRequest, errorBody{Error: "invalid_request", Param: "reference",
			Message: "exactly one non-empty reference query parameter is required"})
		return
	}
	tenant := r.Header.Get("Authorization")
	h.mu.Lock()
	h.stats.Searches++
	data := []payment{}
	for _, e := range h.executions {
		if e.Tenant == tenant && e.Path == path && e.Reference == refs[0] {
			data = append(data, payment{ID: e.ID, Amount: e.Amount, Currency: e.Currency, Customer: e.Customer,
				Reference: e.Reference, Status: "succeeded"})
		}
	}
	h.mu.Unlock()
	writeJSON(w, http.StatusOK, struct {
		Data []payment `json:"data"`
	}{data})
}
