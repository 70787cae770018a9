package idemtest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// CancelsPath is the adyen dialect's cancel by reference (POST {"paymentReference":"R"}),
// rooted at the API's base URL whatever Config.Paths says.
const CancelsPath = "/v1/cancels"

// StripeSearchPath returns the stripe dialects' search path for ref under [PaymentsPath],
// escaped: "/v1/payments/search?query=metadata['reference']:'R'" (a quote in ref escaped as
// \').
func StripeSearchPath(ref string) string {
	q := "metadata['reference']:'" + strings.ReplaceAll(ref, "'", `\'`) + "'"
	return PaymentsPath + "/search?query=" + url.QueryEscape(q)
}

// PaymentPath returns the path of payment id under [PaymentsPath], escaped: the paypal and
// gocardless dialects' fetch.
func PaymentPath(id string) string { return PaymentsPath + "/" + url.PathEscape(id) }

// KeyListPath returns the increase dialect's list of the payments made with key, escaped:
// "/v1/payments?idempotency_key=" + key.
func KeyListPath(key string) string {
	return PaymentsPath + "?idempotency_key=" + url.QueryEscape(key)
}

// cancelScope is what a cancel by reference covers: the tenant's charges with the reference.
type cancelScope struct{ tenant, reference string }

func itoa(n int) string { return strconv.Itoa(n) }

// stripeRoutes: GET <path>/search?query=metadata['reference']:'R', lagging by SearchLag.
func stripeRoutes(h *Handler, paths []string) {
	for _, p := range paths {
		h.mux.HandleFunc("GET "+p+"/search", func(w http.ResponseWriter, r *http.Request) { h.serveStripeSearch(w, r, p) })
	}
}

// fetchRoutes: GET <path>/{id}, the charge as it is now (paypal, gocardless).
func fetchRoutes(h *Handler, paths []string) {
	for _, p := range paths {
		h.mux.HandleFunc("GET "+p+"/{id}", func(w http.ResponseWriter, r *http.Request) { h.serveFetch(w, r, p) })
	}
}

// referenceRoutes: GET <path>?reference=R, consistent (checkout).
func referenceRoutes(h *Handler, paths []string) {
	for _, p := range paths {
		h.mux.HandleFunc("GET "+p, func(w http.ResponseWriter, r *http.Request) { h.serveSearch(w, r, p) })
	}
}

// increaseRoutes: GET <path>?idempotency_key=K, consistent.
func increaseRoutes(h *Handler, paths []string) {
	for _, p := range paths {
		h.mux.HandleFunc("GET "+p, func(w http.ResponseWriter, r *http.Request) {
			keys, ok := r.URL.Query()["idempotency_key"]
			if !ok || len(keys) != 1 || keys[0] == "" {
				h.badQuery(w, "idempotency_key", "exactly one non-empty idempotency_key query parameter is required")
				return
			}
			h.list(w, r, p, func(e *Execution) bool { return e.Key == keys[0] })
		})
	}
}

// adyenRoutes: POST /v1/cancels.
func adyenRoutes(h *Handler, _ []string) {
	h.mux.HandleFunc("POST "+CancelsPath, h.serveCancel)
}

// serveStripeSearch answers 200 {"object":"search_result","data":[...],"has_more":false}
// with the tenant's charges on path whose reference is the query's and that were executed
// at least SearchLag ago (by Config.Now), oldest first; 400 for another query.
func (h *Handler) serveStripeSearch(w http.ResponseWriter, r *http.Request, path string) {
	qs := r.URL.Query()["query"]
	ref, ok := "", len(qs) == 1
	if ok {
		ref, ok = parseStripeQuery(qs[0])
	}
	if !ok {
		h.badQuery(w, "query", `query must be metadata['reference']:'R' with a non-empty R`)
		return
	}
	tenant := r.Header.Get("Authorization")
	now := h.cfg.Now()
	h.mu.Lock()
	h.stats.Searches++
	data := []payment{}
	for i := range h.executions {
		e := &h.executions[i]
		if e.Tenant == tenant && e.Path == path && e.Reference == ref && !now.Before(e.At.Add(h.cfg.SearchLag)) {
			data = append(data, paymentOf(e))
		}
	}
	h.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"object": "search_result", "url": path + "/search",
		"has_more": false, "data": data})
}

// parseStripeQuery reads R from metadata['reference']:'R' (double quotes allowed, \' or \"
// escapes the quote inside).
func parseStripeQuery(q string) (string, bool) {
	for _, prefix := range []string{`metadata['reference']:`, `metadata["reference"]:`} {
		rest, ok := strings.CutPrefix(strings.TrimSpace(q), prefix)
		if !ok || len(rest) < 3 || (rest[0] != '\'' && rest[0] != '"') || rest[len(rest)-1] != rest[0] {
			continue
		}
		quote := rest[:1]
		v := strings.ReplaceAll(rest[1:len(rest)-1], `\`+quote, quote)
		return v, v != ""
	}
	return "", false
}

// serveFetch answers 200 with the charge {id} of the tenant on path as it is now, else 404.
func (h *Handler) serveFetch(w http.ResponseWriter, r *http.Request, path string) {
	id, tenant := r.PathValue("id"), r.Header.Get("Authorization")
	h.mu.Lock()
	h.stats.Fetches++
	var found *payment
	for i := range h.executions {
		if e := &h.executions[i]; e.ID == id && e.Tenant == tenant && e.Path == path {
			p := paymentOf(e)
			found = &p
		}
	}
	h.mu.Unlock()
	if found == nil {
		h.errAnswer(apiError{kind: errNotFound, message: "no payment " + id}).write(w)
		return
	}
	writeJSON(w, http.StatusOK, found)
}

// serveCancel handles the adyen dialect's POST /v1/cancels {"paymentReference":"R"}: every
// charge of the tenant with reference R is canceled, those whose request already arrived and
// is still executing included (they are canceled as they execute); 201
// {"paymentReference":R,"pspReference":"cancel_<n>","status":"received"}. Without a
// reference: 400 in Adyen's format. No key, no faults.
func (h *Handler) serveCancel(w http.ResponseWriter, r *http.Request) {
	var req struct {
		PaymentReference string `json:"paymentReference"`
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil || json.Unmarshal(body, &req) != nil || req.PaymentReference == "" {
		h.refuse(w, apiError{kind: errInvalidBody, param: "paymentReference",
			message: `the body must be {"paymentReference":"..."} with a non-empty reference`})
		return
	}
	tenant, now := r.Header.Get("Authorization"), h.cfg.Now()
	h.mu.Lock()
	h.seq++
	h.cancels[cancelScope{tenant, req.PaymentReference}] = h.seq
	for i := range h.executions {
		if e := &h.executions[i]; e.Tenant == tenant && e.Reference == req.PaymentReference && !e.Canceled {
			e.Canceled, e.CanceledAt = true, now
		}
	}
	h.stats.Cancels++
	psp := "cancel_" + itoa(h.stats.Cancels)
	h.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]string{
		"paymentReference": req.PaymentReference, "pspReference": psp, "status": "received"})
}
