package idemtest

import (
	"crypto/sha256"
	"net/http"
)

// scope identifies an idempotency record: the same key under another tenant or path is
// another record.
type scope struct{ tenant, path, key string }

// record is the server's idempotency record for one scope. Once done it never changes.
type record struct {
	fingerprint [sha256.Size]byte
	done        bool
	result      result
}

// result is a stored answer, replayed byte for byte.
type result struct {
	status      int
	contentType string
	body        []byte
}

// write answers with r; replayed adds the ReplayedHeader.
func (r result) write(w http.ResponseWriter, replayed bool) {
	if replayed {
		w.Header().Set(ReplayedHeader, "true")
	}
	writeRaw(w, r.status, r.contentType, r.body)
}

// claimOutcome is what a claim found.
type claimOutcome int

const (
	claimed    claimOutcome = iota // new record, processing, owned by the caller
	conflict                       // the key is in use with another fingerprint
	inProgress                     // the key is still processing
	completed                      // the key has a stored result
)

// fingerprint is SHA-256 over method, path and body, length-delimited.
func fingerprint(method, path string, body []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte(method))
	h.Write([]byte{0})
	h.Write([]byte(path))
	h.Write([]byte{0})
	h.Write(body)
	var fp [sha256.Size]byte
	h.Sum(fp[:0])
	return fp
}

// claim atomically looks up sc and, if it is free, claims it as processing. On completed it
// returns the stored result. It counts 409s, 422s and replays.
func (h *Handler) claim(sc scope, fp [sha256.Size]byte) (*record, claimOutcome, result) {
	h.mu.Lock()
	defer h.mu.Unlock()
	rec := h.records[sc]
	switch {
	case rec == nil:
		rec = &record{fingerprint: fp}
		h.records[sc] = rec
		return rec, claimed, result{}
	case rec.fingerprint != fp:
		h.stats.KeyReused++
		return rec, conflict, result{}
	case !rec.done:
		h.stats.InProgress++
		return rec, inProgress, result{}
	default:
		h.stats.Replays++
		return rec, completed, rec.result
	}
}

// release frees a claim that stored nothing (validation failed, or the server closed).
func (h *Handler) release(sc scope, rec *record) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.records[sc] == rec && !rec.done {
		delete(h.records, sc)
	}
}

// lookup returns the record of sc: found, done and its result.
func (h *Handler) lookup(sc scope) (found, done bool, res result) {
	h.mu.Lock()
	defer h.mu.Unlock()
	rec := h.records[sc]
	if rec == nil {
		return false, false, result{}
	}
	return true, rec.done, rec.result
}

// storeLocked completes rec with res. The caller holds h.mu.
func (h *Handler) storeLocked(rec *record, res result) {
	rec.done = true
	rec.result = res
}
