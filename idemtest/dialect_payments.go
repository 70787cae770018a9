package idemtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/idemkit/idem/idemserver"
)

// keyScope is a key's scope on idemtest's own key store: (tenant, path, key), as idem's.
type keyScope struct{ tenant, path, key string }

// keyEntry is what idemtest's own key store remembers about one key.
type keyEntry struct {
	fp         []byte         // the request's fingerprint
	req        paymentRequest // the payment, for a stripe-v2 completion
	processing bool           // the first request still runs
	ans        answer         // the kept answer, once !processing
	chargeID   string         // the charge made under the key, "" if none
	created    time.Time      // Config.Now when claimed: KeyRetention counts from here
}

// answer is one HTTP answer, kept under a key or about to be written.
type answer struct {
	status int
	header http.Header // Content-Type included
	body   []byte
}

func (a answer) clone() answer {
	a.header = a.header.Clone()
	return a
}

func (a answer) write(w http.ResponseWriter) {
	for k, vs := range a.header {
		w.Header()[k] = slices.Clone(vs)
	}
	writeRaw(w, a.status, "", a.body)
}

func jsonAnswer(status int, v any) answer {
	return answer{status: status, header: http.Header{"Content-Type": {"application/json"}}, body: mustJSON(v)}
}

// errAnswer renders e in the dialect's format; an in-progress answer carries Retry-After.
func (h *Handler) errAnswer(e apiError) answer {
	ans := jsonAnswer(h.dialect.errs(e))
	if e.kind == errInProgress {
		ans.header.Set("Retry-After", h.retryAfter())
	}
	return ans
}

// chargeAnswerLocked is status with the charge id as it is now.
func (h *Handler) chargeAnswerLocked(status int, id string) answer {
	for i := range h.executions {
		if h.executions[i].ID == id {
			return jsonAnswer(status, paymentOf(&h.executions[i]))
		}
	}
	panic("idemtest: no charge " + id)
}

// serveDialect handles POST <path> for a dialect on idemtest's own key store: OnPayment,
// the counters and the fault, the key, then a repeat or a new execution.
func (h *Handler) serveDialect(w http.ResponseWriter, r *http.Request, path string) {
	if h.cfg.OnPayment != nil {
		h.cfg.OnPayment(r)
	}
	body, readErr := io.ReadAll(http.MaxBytesReader(w, r.Body, idemserver.DefaultMaxBodyBytes))
	key, keyErr := h.dialect.keyOf(r, body, readErr == nil)
	a := h.admit(key, keyErr == nil)
	if a.fault.BeforeProcessing() {
		h.injectBefore(w, a.fault)
		return
	}
	switch {
	case readErr != nil:
		kind := errInvalidBody
		if _, ok := errors.AsType[*http.MaxBytesError](readErr); ok {
			kind = errTooLarge
		}
		h.refuse(w, apiError{kind: kind, message: "reading body: " + readErr.Error()})
		return
	case keyErr != nil:
		h.refuse(w, *keyErr)
		return
	}
	req, invalid := parsePayment(body)
	sc := keyScope{tenant: r.Header.Get("Authorization"), path: path, key: key}
	fp := h.dialect.fingerprint(path, body)
	now := h.cfg.Now()

	h.mu.Lock()
	e := h.keys[sc]
	if e != nil && !e.processing && h.cfg.KeyRetention > 0 && !now.Before(e.created.Add(h.cfg.KeyRetention)) {
		delete(h.keys, sc) // forgotten: the same key is a new request
		e = nil
	}
	if e != nil {
		ans := h.repeatLocked(sc, e, fp, a)
		h.mu.Unlock()
		ans.write(w)
		return
	}
	if invalid != nil { // nothing claimed, nothing stored
		h.mu.Unlock()
		h.refuse(w, apiError{kind: errInvalidBody, message: invalid.Message, param: invalid.Param})
		return
	}
	e = &keyEntry{fp: fp, req: req, processing: true, created: now}
	h.keys[sc] = e
	h.mu.Unlock()
	h.execute(w, sc, e, a)
}

// refuse answers a 400 or 413, which stores nothing.
func (h *Handler) refuse(w http.ResponseWriter, e apiError) {
	h.mu.Lock()
	h.stats.BadRequests++
	h.mu.Unlock()
	h.errAnswer(e).write(w)
}

// execute runs a claimed key's payment under its fault, keeps what the dialect keeps and
// answers.
func (h *Handler) execute(w http.ResponseWriter, sc keyScope, e *keyEntry, a *arrival) {
	d := h.dialect
	if a.fault == FaultSlow {
		h.countFault(a.fault)
		if !h.wait() {
			h.settle(sc, e, answer{}, "", false)
			h.errAnswer(apiError{kind: errUnavailable}).write(w)
			return
		}
	}
	var id string
	var created answer
	if a.fault != FaultStored500 {
		id = h.charge(sc.tenant, sc.path, sc.key, e.req, a.seq)
		h.mu.Lock()
		created = h.chargeAnswerLocked(http.StatusCreated, id)
		h.mu.Unlock()
	}
	internal := h.errAnswer(apiError{kind: errInternal, key: sc.key})
	if d.transient && id == "" {
		internal.header.Set(TransientErrorHeader, "true") // nothing executed: retry with the key
	}
	wire, stored := created, created
	switch a.fault {
	case FaultStored500, FaultStored500AfterCharge:
		wire, stored = internal, internal
	case Fault500AfterCommit:
		wire = internal
	}
	if a.fault != FaultNone && a.fault != FaultSlow {
		h.countFault(a.fault)
	}
	keep := true
	switch d.keep {
	case keepAnswer:
		keep = !(d.transient && id == "")
	case keep2xx:
		keep = wire.status/100 == 2 // a dropped 201 was sent, so it is kept
	case keepCharge:
		keep, stored = id != "", created
	}
	h.settle(sc, e, stored, id, keep)
	if a.fault == FaultDropAfterCommit {
		resetConn(w)
		return
	}
	wire.write(w)
}

// settle ends a claim: keeps ans and the charge under the key, or forgets the key.
func (h *Handler) settle(sc keyScope, e *keyEntry, ans answer, id string, keep bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.keys[sc] != e {
		return
	}
	if !keep {
		delete(h.keys, sc)
		return
	}
	e.processing, e.ans, e.chargeID = false, ans, id
}

// repeatLocked answers a request whose key is known: in progress, another body, or the
// dialect's repeat (replay, completion, current state, pointer).
func (h *Handler) repeatLocked(sc keyScope, e *keyEntry, fp []byte, a *arrival) answer {
	d := h.dialect
	switch {
	case e.processing:
		h.stats.InProgress++
		return h.errAnswer(apiError{kind: errInProgress, key: sc.key})
	case d.checkBody && !bytes.Equal(e.fp, fp):
		h.stats.KeyReused++
		return h.errAnswer(apiError{kind: errKeyReused, id: e.chargeID, key: sc.key})
	}
	switch d.repeat {
	case repeatComplete:
		if e.ans.status >= http.StatusInternalServerError { // finish the work, answer the final 2xx
			if e.chargeID == "" {
				e.chargeID = h.chargeLocked(sc.tenant, sc.path, sc.key, e.req, a.seq)
			}
			e.ans = h.chargeAnswerLocked(http.StatusCreated, e.chargeID)
			return e.ans.clone()
		}
	case repeatCurrent:
		h.stats.Replays++
		return h.chargeAnswerLocked(http.StatusOK, e.chargeID)
	case repeatPointer:
		h.stats.Replays++
		return h.errAnswer(apiError{kind: errConflict, id: e.chargeID, key: sc.key})
	}
	h.stats.Replays++
	ans := e.ans.clone()
	if d.replayed {
		ans.header.Set(ReplayedHeader, "true")
	}
	return ans
}

// keyOf reads the request's key from the dialect's carrier. bodyOK is false when the body
// could not be read (a body key is then reported missing).
func (d *dialect) keyOf(r *http.Request, body []byte, bodyOK bool) (string, *apiError) {
	maxLen := d.maxKey
	if maxLen == 0 {
		maxLen = MaxKeyLength
	}
	if d.keyHeader == "" {
		var f map[string]json.RawMessage
		if !bodyOK || json.Unmarshal(body, &f) != nil {
			return "", &apiError{kind: errInvalidBody, message: "body is not a valid JSON object"}
		}
		raw, ok := f[d.keyField]
		if !ok {
			return "", &apiError{kind: errMissingKey, message: d.keyField + " is required"}
		}
		var key string
		if json.Unmarshal(raw, &key) != nil || key == "" || len(key) > maxLen {
			return "", &apiError{kind: errInvalidKey, message: d.keyField + " must be a non-empty string of at most " +
				itoa(maxLen) + " bytes"}
		}
		return key, nil
	}
	vs := r.Header.Values(d.keyHeader)
	if len(vs) == 0 {
		return "", &apiError{kind: errMissingKey, message: "the " + d.keyHeader + " header is required"}
	}
	key, err := idemserver.ParseKey(vs[0])
	if len(vs) != 1 || err != nil || len(key) > maxLen {
		return "", &apiError{kind: errInvalidKey, message: "the " + d.keyHeader + " header must be one key of at most " +
			itoa(maxLen) + " visible ASCII characters"}
	}
	return key, nil
}

// fingerprint is rawFingerprint over the body as sent; for a body key, over the body's
// canonical JSON without the key field (Square compares the request, not the key).
func (d *dialect) fingerprint(path string, body []byte) []byte {
	if d.keyHeader == "" {
		var f map[string]json.RawMessage
		if json.Unmarshal(body, &f) == nil {
			delete(f, d.keyField)
			body = mustJSON(f) // sorted keys, compacted values
		}
	}
	return rawFingerprint(http.MethodPost, operation(path), body)
}
