package idemtest

import (
	"crypto/sha256"
	"encoding/binary"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem/idemserver"
)

// operation is the idemserver operation of the POST endpoint at path, as the middleware's
// default Config.Operation names it: the status endpoint looks keys up under the same name.
func operation(path string) string { return http.MethodPost + " " + path }

// newMiddleware is the server half idemtest runs on: idemserver's middleware on a memory
// backend, configured as this package documents it.
func (h *Handler) newMiddleware() *idemserver.Middleware {
	retryAfter := time.Duration(h.cfg.RetryAfter) * time.Second
	if retryAfter == 0 {
		retryAfter = -1 // "Retry-After: 0"
	}
	mw, err := idemserver.New(idemserver.Config{
		Backend: h.backend,
		// A test server: the tenant is the raw Authorization value, "" without one. A real
		// API takes it from the verified credentials.
		Tenant:      func(r *http.Request) (string, error) { return r.Header.Get("Authorization"), nil },
		KeyHeader:   h.cfg.KeyHeader,
		RetryAfter:  retryAfter,
		Now:         h.cfg.Now,
		Retention:   h.cfg.KeyRetention, // 0: idemserver's default
		Fingerprint: rawFingerprint,
		WriteProblem: func(w http.ResponseWriter, r *http.Request, p idemserver.Problem) {
			if h.cfg.Dialect == DialectIETF {
				h.countBadRequest(p.Status)
				idemserver.WriteProblemJSON(w, p) // RFC 9457, as the IETF draft shows it
				return
			}
			h.writeProblem(w, p)
		},
		OnEvent: h.countEvent,
	})
	if err != nil { // the configuration above is always valid
		panic("idemtest: " + err.Error())
	}
	return mw
}

// rawFingerprint is SHA-256 over method, operation and the body bytes as sent, each
// length-prefixed. Stricter than idemserver's canonical fingerprint on purpose: a client
// must resend byte-identical bodies, and a test server should catch one that does not.
func rawFingerprint(method, op string, body []byte) []byte {
	h := sha256.New()
	var n [8]byte
	for _, part := range [][]byte{[]byte(method), []byte(op), body} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return h.Sum(nil)
}

// problemCodes maps the middleware's problem types to this API's error codes.
var problemCodes = map[string]string{
	idemserver.ProblemKeyMissing:     "missing_idempotency_key",
	idemserver.ProblemKeyInvalid:     "invalid_idempotency_key",
	idemserver.ProblemKeyReused:      "idempotency_key_reused",
	idemserver.ProblemInProgress:     "request_in_progress",
	idemserver.ProblemBodyTooLarge:   "request_too_large",
	idemserver.ProblemBodyUnreadable: "invalid_request",
	idemserver.ProblemUnauthorized:   "unauthorized",
	idemserver.ProblemUnavailable:    "service_unavailable",
}

// writeProblem renders the middleware's own answers in this API's error format,
// {"error":code,"message":detail}, and counts 400s and 413s as BadRequests.
func (h *Handler) writeProblem(w http.ResponseWriter, p idemserver.Problem) {
	code, ok := problemCodes[p.Type]
	if !ok {
		code = p.Type[strings.LastIndex(p.Type, "/")+1:]
	}
	msg := p.Detail
	if msg == "" {
		msg = p.Title
	}
	h.countBadRequest(p.Status)
	writeJSON(w, p.Status, errorBody{Error: code, Message: msg})
}

// countBadRequest counts a 400 or 413 answer of the middleware as a BadRequest.
func (h *Handler) countBadRequest(status int) {
	if status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge {
		h.mu.Lock()
		h.stats.BadRequests++
		h.mu.Unlock()
	}
}

// countEvent keeps the Stats counters the middleware's events feed.
func (h *Handler) countEvent(e idemserver.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch e.Kind {
	case idemserver.EventReplay:
		h.stats.Replays++
	case idemserver.EventConcurrent:
		h.stats.InProgress++
	case idemserver.EventPayloadConflict:
		h.stats.KeyReused++
	}
}
