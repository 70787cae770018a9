package idemadmin

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem"
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

// RecordStats is the "records" member of the admin handler's GET /stats: what the
// keystore holds now. Ages are in whole seconds, measured from CreatedAt; nil (JSON null)
// when there is no record in that state, so that 0 always means a record just created.
type RecordStats struct {
	// Total is the number of records in the keystore, every state and tenant.
	Total int `json:"total"`
	// ByState counts the records of each state; every state is present, 0 when none.
	ByState map[keystore.State]int `json:"by_state"`
	// OldestPendingSeconds is the age of the oldest pending record in seconds, nil (null)
	// when no record is pending.
	OldestPendingSeconds *int64 `json:"oldest_pending_seconds"`
	// OldestManualSeconds is the age of the oldest manual record in seconds, nil (null) when
	// no record is manual.
	OldestManualSeconds *int64 `json:"oldest_manual_seconds"`
	// Tenants is the number of distinct tenants (Record.Scope) among the records.
	Tenants int `json:"tenants"`
	// Damaged is the number of stored records that cannot be decoded: skipped, left
	// untouched, not counted in Total, and listed by GET /records. Only a store that reports
	// them (keystore.Pager: boltstore, pgstore) can count them; ComputeRecordStats
	// leaves it 0.
	Damaged int `json:"damaged"`
}

// ComputeRecordStats counts recs by state and finds the oldest pending and manual ones,
// ages measured at now.
func ComputeRecordStats(recs []*keystore.Record, now time.Time) RecordStats {
	a := newRecordStats(now)
	for _, r := range recs {
		a.add(r)
	}
	return a.result()
}

// recordStats builds RecordStats one record at a time, so that GET /stats reads the
// keystore page by page instead of holding every record.
type recordStats struct {
	s       RecordStats
	tenants map[string]bool
	now     time.Time
}

func newRecordStats(now time.Time) *recordStats {
	return &recordStats{now: now, tenants: map[string]bool{}, s: RecordStats{ByState: map[keystore.State]int{
		keystore.StatePending: 0, keystore.StateSucceeded: 0, keystore.StateFailed: 0, keystore.StateManual: 0}}}
}

func (a *recordStats) add(r *keystore.Record) {
	a.s.Total++
	a.s.ByState[r.State]++
	a.tenants[r.Scope] = true
	age := int64(a.now.Sub(r.CreatedAt) / time.Second)
	switch r.State {
	case keystore.StatePending:
		a.s.OldestPendingSeconds = oldestOf(a.s.OldestPendingSeconds, age)
	case keystore.StateManual:
		a.s.OldestManualSeconds = oldestOf(a.s.OldestManualSeconds, age)
	}
}

func (a *recordStats) result() RecordStats {
	a.s.Tenants = len(a.tenants)
	return a.s
}

// oldestOf is the larger of *cur and a, a when cur is nil (no record yet).
func oldestOf(cur *int64, a int64) *int64 {
	if cur != nil && *cur >= a {
		return cur
	}
	return &a
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

// listCursor is a place in GET /records' order (CreatedAt, then scope and key): next_after
// names the last record of a page, and after=that lists what follows it, so that records
// settled or added between pages shift no other record out of the listing (an offset does).
type listCursor struct {
	created    int64 // CreatedAt, Unix nanoseconds
	scope, key string
}

func cursorOf(r *Record) listCursor {
	return listCursor{created: r.CreatedAt.UnixNano(), scope: r.Scope, key: r.Key}
}

// compare orders by time, then scope, then key: compared apart, since a scope may hold any
// byte and a joined name would make ("a\x00b", "c") and ("a", "b\x00c") one place.
func (c listCursor) compare(d listCursor) int {
	if c.created != d.created {
		return cmp.Compare(c.created, d.created)
	}
	if n := strings.Compare(c.scope, d.scope); n != 0 {
		return n
	}
	return strings.Compare(c.key, d.key)
}

// String is the cursor as next_after carries it: URL-safe base64 of the time, the scope's
// length, and the scope and key.
func (c listCursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.created, 10) + "\x00" +
		strconv.Itoa(len(c.scope)) + "\x00" + c.scope + c.key))
}

func parseListCursor(s string) (listCursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return listCursor{}, err
	}
	t, rest, ok := strings.Cut(string(b), "\x00")
	l, name, ok2 := strings.Cut(rest, "\x00")
	if !ok || !ok2 {
		return listCursor{}, errors.New("not a cursor of this listing")
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return listCursor{}, err
	}
	scopeLen, err := strconv.Atoi(l)
	if err != nil || scopeLen < 0 || scopeLen > len(name) {
		return listCursor{}, errors.New("bad scope length")
	}
	return listCursor{created: n, scope: name[:scopeLen], key: name[scopeLen:]}, nil
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

// ResolveRequest is the body of the admin handler's POST /resolve.
type ResolveRequest struct {
	Tenant  string `json:"tenant"`           // the record's tenant (Record.Scope); "" is a valid one
	Key     string `json:"key,omitempty"`    // names the record by key; exactly one of Key and Intent
	Intent  string `json:"intent,omitempty"` // names the record by intent instead
	Verdict string `json:"verdict"`          // "executed" or "not_executed" (Verdict.String)
	Note    string `json:"note"`             // required: who decided, on what evidence
	// Response is the answer found for "executed" (the charge), kept as the record's answer;
	// nil means an empty 200. Body is the text of the answer.
	Response *Response `json:"response,omitempty"`
}

// Response is the answer an operator records with an "executed" verdict.
type Response struct {
	StatusCode int         `json:"status"`           // HTTP status, 100 to 599 (else 400)
	Header     http.Header `json:"header,omitempty"` // its headers; credential headers are stripped before storing
	Body       string      `json:"body,omitempty"`   // its body as text, such as the charge's JSON
}

// resolve serves POST /resolve.
func (h *adminHandler) resolve(w http.ResponseWriter, r *http.Request) {
	// A cross-site HTML form can POST text/plain whose body happens to be JSON, with the
	// operator's cookies; it cannot send application/json without a CORS preflight.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		problem(w, http.StatusUnsupportedMediaType, "the body must be sent as Content-Type: application/json")
		return
	}
	var req ResolveRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAdminBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		problem(w, http.StatusBadRequest, "the body must be one JSON resolve request: "+clipInput(err.Error()))
		return
	}
	if _, err := dec.Token(); err != io.EOF {
		problem(w, http.StatusBadRequest, "the body must hold one JSON object, nothing after it")
		return
	}
	var res idem.Resolution
	switch req.Verdict {
	case idem.VerdictExecuted.String():
		res.Verdict = idem.VerdictExecuted
	case idem.VerdictNotExecuted.String():
		res.Verdict = idem.VerdictNotExecuted
	default:
		problem(w, http.StatusBadRequest, fmt.Sprintf("verdict %s: want %q or %q", quoteInput(req.Verdict), idem.VerdictExecuted, idem.VerdictNotExecuted))
		return
	}
	if strings.TrimSpace(req.Note) == "" {
		problem(w, http.StatusBadRequest, "a note is required: who decided, and on what evidence")
		return
	}
	res.Note = req.Note
	if req.Response != nil {
		if res.Verdict != idem.VerdictExecuted {
			problem(w, http.StatusBadRequest, "a response goes only with the executed verdict")
			return
		}
		if req.Response.StatusCode < 100 || req.Response.StatusCode > 599 {
			problem(w, http.StatusBadRequest, fmt.Sprintf("response status %d is not an HTTP status", req.Response.StatusCode))
			return
		}
		res.Response = &keystore.Response{StatusCode: req.Response.StatusCode,
			Header: keystore.StripSecrets(req.Response.Header, h.c.SecretHeaders()...), Body: []byte(req.Response.Body)}
	}
	rec, ok := h.find(w, r, req.Tenant, req.Key, req.Intent)
	if !ok {
		return
	}
	out, err := h.c.Resolve(r.Context(), rec.Scope, rec.Key, res)
	switch {
	case errors.Is(err, idem.ErrNotManual): // the state Resolve found, which may have changed since find
		cause := err
		if oe, ok := errors.AsType[*idem.OperationError](err); ok && oe.Cause != nil {
			cause = oe.Cause
		}
		problem(w, http.StatusConflict, fmt.Sprintf("key %s: %v; only a manual record can be resolved", quoteInput(rec.Key), cause))
	case errors.Is(err, keystore.ErrNotFound):
		problem(w, http.StatusNotFound, fmt.Sprintf("key %s is gone", quoteInput(rec.Key)))
	case errors.Is(err, idem.ErrInvalidOperation):
		problem(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, keystore.ErrInvalid): // the request's text: a note with NUL on pgstore
		problem(w, http.StatusBadRequest, "the keystore cannot hold this resolution: "+err.Error())
	case errors.Is(err, idem.ErrClockSkew): // this host's clock: fix it, or resolve from another
		problem(w, http.StatusServiceUnavailable, err.Error())
	case err != nil:
		problem(w, http.StatusInternalServerError, err.Error())
	default:
		writeAdminJSON(w, h.scrub(out))
	}
}

// recoverNow serves POST /recover.
func (h *adminHandler) recoverNow(w http.ResponseWriter, r *http.Request) {
	if !h.recovering.TryLock() {
		problem(w, http.StatusConflict, "a recover started from the admin handler is still running")
		return
	}
	defer h.recovering.Unlock()
	now := h.c.Now()
	var mu sync.Mutex // Recover calls handle from several goroutines
	var outcomes []map[string]any
	rep, err := h.c.Recover(r.Context(), func(rc idem.Reconciled) {
		if rc.Record != nil {
			o := map[string]any{"record": adminSummary(rc.Record, now)}
			if rc.Err != nil {
				o["error"] = rc.Err.Error()
			}
			mu.Lock()
			outcomes = append(outcomes, o)
			mu.Unlock()
		}
		if h.opts.OnReconciled != nil {
			h.opts.OnReconciled(rc)
		}
	})
	// Damaged records were skipped and every other one reconciled: the outcomes stand, and
	// the skipped keys are listed beside them rather than losing the run to a 500.
	var damaged *idem.DamagedRecordsError
	if err != nil && !errors.As(err, &damaged) {
		problem(w, http.StatusInternalServerError, "recover: "+err.Error())
		return
	}
	if outcomes == nil {
		outcomes = []map[string]any{}
	}
	skipped := []adminDamaged{}
	if damaged != nil {
		for _, d := range damaged.Records {
			skipped = append(skipped, toAdminDamaged(d))
		}
	}
	slices.SortFunc(outcomes, func(a, b map[string]any) int {
		ra, rb := a["record"].(Record), b["record"].(Record)
		return strings.Compare(ra.Scope+"\x00"+ra.Key, rb.Scope+"\x00"+rb.Key)
	})
	writeAdminJSON(w, map[string]any{"report": snakeFields(rep), "records": outcomes, "damaged": skipped})
}

// stats serves GET /stats.
func (h *adminHandler) stats(w http.ResponseWriter, r *http.Request) {
	acc := newRecordStats(h.c.Now())
	err := keystore.ListAll(r.Context(), h.c.Store(), nil, 0, func(p keystore.Page) error {
		acc.s.Damaged += len(p.Damaged)
		for _, rec := range p.Records {
			acc.add(rec)
		}
		return nil
	})
	if err != nil {
		problem(w, http.StatusInternalServerError, "listing records: "+err.Error())
		return
	}
	writeAdminJSON(w, map[string]any{"client": snakeFields(h.c.Stats()), "records": acc.result()})
}
