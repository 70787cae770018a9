package idemadmin

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/keystore"
)

// Record is one row of the admin handler's GET /records: a record without its bodies
// and headers. AgeSeconds is measured from CreatedAt by the client's clock (Config.Now).
type Record struct {
	Scope          string         `json:"tenant"`                // the tenant (Record.Scope); "tenant", as the query parameter
	Key            string         `json:"key"`                   // the idempotency key
	Intent         string         `json:"intent,omitempty"`      // the caller-named intent, such as an order id
	State          keystore.State `json:"state"`                 // pending, succeeded, failed or manual
	Method         string         `json:"method"`                // the operation's HTTP method
	URL            string         `json:"url"`                   // relative to the client's BaseURL
	Attempts       int            `json:"attempts"`              // requests sent to the API so far
	LastStatusCode int            `json:"last_status,omitempty"` // of the last answer; 0 (omitted) if none
	Reason         string         `json:"reason,omitempty"`      // stop reason (Reason* constants)
	Error          string         `json:"error,omitempty"`       // why it failed or is still unknown
	Note           string         `json:"note,omitempty"`        // who resolved it, on what evidence
	AgeSeconds     int64          `json:"age_seconds"`           // seconds since CreatedAt (Config.Now)
	CreatedAt      time.Time      `json:"created_at"`            // when the key was persisted
	UpdatedAt      time.Time      `json:"updated_at"`            // the record's last write
}

func adminSummary(r *keystore.Record, now time.Time) Record {
	return Record{Scope: r.Scope, Key: r.Key, Intent: r.Intent, State: r.State,
		Method: r.Request.Method, URL: r.Request.URL, Attempts: r.Attempts, LastStatusCode: r.LastStatusCode,
		Reason: r.Reason, Error: r.Error, Note: r.Note, AgeSeconds: int64(now.Sub(r.CreatedAt) / time.Second),
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

// list serves GET /records.
func (h *adminHandler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var states []keystore.State
	if s := q.Get("state"); s != "" {
		for part := range strings.SplitSeq(s, ",") {
			st := keystore.State(strings.TrimSpace(part))
			if !st.Valid() {
				problem(w, http.StatusBadRequest, fmt.Sprintf("unknown state %s (pending, succeeded, failed, manual)", quoteInput(string(st))))
				return
			}
			states = append(states, st)
		}
	}
	var minAge time.Duration
	if s := q.Get("min_age"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			problem(w, http.StatusBadRequest, fmt.Sprintf("min_age %s is not a non-negative duration such as 10m", quoteInput(s)))
			return
		}
		minAge = d
	}
	limit, ok := queryInt(w, q.Get("limit"), "limit", h.opts.MaxLimit, 1, h.opts.MaxLimit)
	if !ok {
		return
	}
	offset, ok := queryInt(w, q.Get("offset"), "offset", 0, 0, -1)
	if !ok {
		return
	}
	var after *listCursor
	if s := q.Get("after"); s != "" {
		c, err := parseListCursor(s)
		if err != nil || offset > 0 {
			problem(w, http.StatusBadRequest, fmt.Sprintf("after %s is not a next_after value of this endpoint, or comes with an offset", quoteInput(s)))
			return
		}
		after = &c
	}
	now := h.c.Now()
	_, oneTenant := q["tenant"]
	tenant := q.Get("tenant")
	// Read page by page (keystore.ListAll), keeping only the summaries: a record that cannot
	// be decoded is listed under "damaged" instead of failing the whole listing.
	var rows []Record
	damaged := []adminDamaged{}
	err := keystore.ListAll(r.Context(), h.c.Store(), states, 0, func(p keystore.Page) error {
		for _, d := range p.Damaged {
			if !oneTenant || d.Scope == tenant { // another tenant's keys stay out of a tenant's listing
				damaged = append(damaged, toAdminDamaged(d))
			}
		}
		for _, rec := range p.Records {
			if now.Sub(rec.CreatedAt) >= minAge && (!oneTenant || rec.Scope == tenant) {
				rows = append(rows, adminSummary(rec, now))
			}
		}
		return nil
	})
	if err != nil {
		problem(w, http.StatusInternalServerError, "listing records: "+err.Error())
		return
	}
	// Oldest first whatever the store's page order (bbolt pages in key order).
	slices.SortStableFunc(rows, func(a, b Record) int { return cursorOf(&a).compare(cursorOf(&b)) })
	page := struct {
		Records    []Record       `json:"records"`
		Total      int            `json:"total"`
		NextOffset int            `json:"next_offset,omitempty"`
		NextAfter  string         `json:"next_after,omitempty"`
		Damaged    []adminDamaged `json:"damaged"`
	}{Records: []Record{}, Total: len(rows), Damaged: damaged}
	if after != nil { // the first record past the cursor, wherever the set moved since
		offset, _ = slices.BinarySearchFunc(rows, *after, func(r Record, c listCursor) int {
			if cursorOf(&r).compare(c) <= 0 {
				return -1
			}
			return 1
		})
	}
	if offset < len(rows) {
		end := len(rows)
		if limit < end-offset { // not offset+limit < end: a huge offset would overflow
			end = offset + limit
			page.NextOffset = end
			page.NextAfter = cursorOf(&rows[end-1]).String()
		}
		page.Records = append(page.Records, rows[offset:end]...)
	}
	writeAdminJSON(w, page)
}

// adminDamaged is a record the store could not decode, as the admin handler lists it.
type adminDamaged struct {
	Scope string `json:"tenant"`
	Key   string `json:"key"`
	Error string `json:"error"`
}

func toAdminDamaged(d keystore.DamagedRecord) adminDamaged {
	return adminDamaged{Scope: d.Scope, Key: d.Key, Error: fmt.Sprint(d.Err)}
}

// queryInt parses a query number in [lo, hi] (hi < 0: no upper bound), def when absent.
func queryInt(w http.ResponseWriter, s, name string, def, lo, hi int) (int, bool) {
	if s == "" {
		return def, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || (hi >= 0 && n > hi) {
		bound := fmt.Sprintf("at least %d", lo)
		if hi >= 0 {
			bound = fmt.Sprintf("%d to %d", lo, hi)
		}
		problem(w, http.StatusBadRequest, fmt.Sprintf("%s %s must be a whole number, %s", name, quoteInput(s), bound))
		return 0, false
	}
	return n, true
}

// find reads the record named by (tenant, key) or (tenant, intent): exactly one of the two.
func (h *adminHandler) find(w http.ResponseWriter, r *http.Request, tenant, key, intent string) (*keystore.Record, bool) {
	if (key == "") == (intent == "") {
		problem(w, http.StatusBadRequest, "name the record by key or by intent (one of the two), with its tenant")
		return nil, false
	}
	var rec *keystore.Record
	var err error
	if key != "" {
		rec, err = h.c.Store().Get(r.Context(), tenant, key)
	} else {
		rec, err = h.c.Store().GetByIntent(r.Context(), tenant, intent)
	}
	if err == nil && rec == nil {
		err = errNilRecord
	}
	switch {
	case errors.Is(err, keystore.ErrNotFound):
		what := "key " + quoteInput(key)
		if key == "" {
			what = "intent " + quoteInput(intent)
		}
		problem(w, http.StatusNotFound, fmt.Sprintf("no record for %s in tenant %s", what, quoteInput(tenant)))
		return nil, false
	case err != nil:
		problem(w, http.StatusInternalServerError, "reading the record: "+err.Error())
		return nil, false
	}
	return rec, true
}

// errNilRecord: a keystore answered neither a record nor an error.
var errNilRecord = errors.New("idemadmin: keystore returned neither a record nor an error")

// scrub drops credential headers from a record about to be shown, whatever wrote it.
func (h *adminHandler) scrub(rec *keystore.Record) *keystore.Record {
	return keystore.StoredCopy(rec, h.c.SecretHeaders()...)
}

// show serves GET /record.
func (h *adminHandler) show(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	rec, ok := h.find(w, r, q.Get("tenant"), q.Get("key"), q.Get("intent"))
	if ok {
		writeAdminJSON(w, h.scrub(rec))
	}
}
