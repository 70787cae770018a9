package idemadmin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore"
)

// POST /resolve and POST /recover: settling records from the admin port.

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
	case errors.Is(err, idem.ErrCancelInFlight): // nothing written: give the verdict again later
		problem(w, http.StatusConflict, fmt.Sprintf("key %s: %v", quoteInput(rec.Key), err))
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
