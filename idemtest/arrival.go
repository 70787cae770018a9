package idemtest

import (
	"bytes"
	"context"
	"net/http"

	"github.com/idemkit/idem/idemserver"
)

// arrival is one POST's fault, taken on arrival and read by the payment handler behind the
// middleware.
type arrival struct {
	fault Fault
	seq   uint64 // arrival order among POSTs and cancels: a later cancel cancels its charge
	acted bool   // set by servePayment when an after-commit fault took effect
}

type arrivalKey struct{}

// arrivalOf returns r's arrival; a request that did not come through arrive has no fault.
func arrivalOf(r *http.Request) *arrival {
	if a, ok := r.Context().Value(arrivalKey{}).(*arrival); ok {
		return a
	}
	return &arrival{}
}

// arrive handles a POST on the wire, outside the middleware (next): OnPayment, the
// counters, the fault. Before-processing faults answer here and never reach the middleware.
// The after-commit faults (drop the answer, answer 500) let the middleware execute and store
// the payment, then replace its answer on the wire; when the request did not execute (a
// replay, 409, 422 or 400) the middleware's answer goes out unchanged and the fault is
// consumed without effect.
func (h *Handler) arrive(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if h.cfg.OnPayment != nil {
		h.cfg.OnPayment(r)
	}
	key, err := "", error(nil)
	if vs := r.Header.Values(h.cfg.KeyHeader); len(vs) == 1 {
		key, err = idemserver.ParseKey(vs[0])
	} else {
		err = idemserver.ErrInvalidKey
	}
	a := h.admit(key, err == nil)
	fault := a.fault

	if fault.BeforeProcessing() {
		h.injectBefore(w, fault)
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), arrivalKey{}, a))
	if fault != FaultDropAfterCommit && fault != Fault500AfterCommit {
		next.ServeHTTP(w, r)
		return
	}
	buf := &bufferedAnswer{header: http.Header{}}
	next.ServeHTTP(buf, r)
	if !a.acted || buf.status != http.StatusCreated {
		buf.forward(w)
		return
	}
	h.countFault(fault) // the payment is executed and its 201 stored
	if fault == FaultDropAfterCommit {
		resetConn(w)
		return
	}
	writeJSON(w, http.StatusInternalServerError, errorBody{Error: "internal"})
}

// admit counts an arriving POST, under key when keyOK, and takes its fault and its place in
// the arrival order.
func (h *Handler) admit(key string, keyOK bool) *arrival {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stats.Requests++
	if keyOK {
		h.attemptsFor[key]++
	}
	h.seq++
	return &arrival{fault: h.nextFaultLocked(), seq: h.seq}
}

// bufferedAnswer holds the middleware's answer until arrive decides what goes on the wire.
type bufferedAnswer struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedAnswer) Header() http.Header { return b.header }

func (b *bufferedAnswer) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}

func (b *bufferedAnswer) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}

// forward sends the buffered answer unchanged.
func (b *bufferedAnswer) forward(w http.ResponseWriter) {
	for k, vs := range b.header {
		w.Header()[k] = vs
	}
	if b.status == 0 {
		b.status = http.StatusOK
	}
	w.WriteHeader(b.status)
	_, _ = w.Write(b.body.Bytes())
}
