package idemserver

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"strconv"
)

// What the middleware writes back: a stored answer replayed, the handler's answer as
// recorded, a 503 when the backend fails.

// answer sends rec's answer as recorded.
func answer(w http.ResponseWriter, rec *recorder) {
	resp := rec.response()
	send(w, rec.header, resp.StatusCode, resp.Body)
}

func (m *Middleware) unavailable(w http.ResponseWriter, r *http.Request, scope Scope, err error) {
	m.unavailableSaying(w, r, scope, err, "nothing was stored; retry with the same key")
}

// unavailableSaying is unavailable with another detail.
func (m *Middleware) unavailableSaying(w http.ResponseWriter, r *http.Request, scope Scope, err error, detail string) {
	m.event(Event{Kind: EventStoreError, Scope: scope, StatusCode: http.StatusServiceUnavailable, Err: err})
	w.Header().Set("Retry-After", m.retryAfter())
	m.problem(w, r, Problem{Type: ProblemUnavailable, Title: "Idempotency store unavailable", Status: http.StatusServiceUnavailable,
		Detail: detail})
}

func (m *Middleware) retryAfter() string {
	if m.cfg.RetryAfter < 0 {
		return "0"
	}
	return strconv.Itoa(int(math.Ceil(m.cfg.RetryAfter.Seconds())))
}

// replay writes a stored answer with Idempotent-Replayed: true.
func replay(w http.ResponseWriter, resp *Response) {
	for k, vs := range resp.Header {
		w.Header()[k] = append([]string(nil), vs...)
	}
	w.Header().Set(ReplayedHeader, "true")
	send(w, nil, resp.StatusCode, resp.Body)
}

// send writes status and body, with header (if any) and an exact Content-Length. A status
// net/http would panic on (from a Backend that stored one) goes out as a 500: the stored
// answer says execution began, and nothing better can be said of it.
func send(w http.ResponseWriter, header http.Header, status int, body []byte) {
	sendIn(w, header, status, body, new([1]string))
}

// sendIn is send with the Content-Length header's value slice in length, which the
// ResponseWriter keeps: the execution's own, so that its answer allocates none.
func sendIn(w http.ResponseWriter, header http.Header, status int, body []byte, length *[1]string) {
	if status < 100 || status > 999 {
		status = http.StatusInternalServerError
	}
	h := w.Header()
	for k, vs := range header {
		h[k] = vs
	}
	length[0] = strconv.Itoa(len(body))
	h["Content-Length"] = length[:] // http.Header.Set, without its allocation
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// sendFields is sendIn with the header as a list of fields (completeHandingOver).
func sendFields(w http.ResponseWriter, fields []field, status int, body []byte, length *[1]string) {
	h := w.Header()
	for _, f := range fields {
		h[f.name] = f.values
	}
	sendIn(w, nil, status, body, length)
}

// recorder buffers the handler's answer: nothing reaches the client before it is stored.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if code < 100 || code > 999 {
		// net/http panics here too. Recorded, the code was stored, and its replay (which
		// does reach net/http) panicked on every retry of the key; panicking now takes the
		// handler-panic path: the key keeps a 500 if execution began.
		panic(fmt.Sprintf("idemserver: invalid WriteHeader code %v", code))
	}
	if r.status == 0 && code >= 200 {
		r.status = code
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

func (r *recorder) response() Response {
	st := r.status
	if st == 0 {
		st = http.StatusOK
	}
	r.header.Del("Content-Length")
	return Response{StatusCode: st, Body: r.body.Bytes()}
}
