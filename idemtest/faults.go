package idemtest

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Fault is a failure the server injects into one POST request.
type Fault int

// The faults. Before-processing faults execute nothing; the others act only on a request
// that claims a new key and passes validation (see the package documentation). The comments
// below describe the idem dialect; the package documentation's "Faults in the dialects"
// says how every other dialect maps each fault.
const (
	// FaultNone: no fault, the request is served normally.
	FaultNone Fault = iota
	// Fault503: 503 with "Retry-After: <seconds>"; nothing executed.
	Fault503
	// Fault503Date: 503 with Retry-After as an IMF-fixdate (now + RetryAfter seconds,
	// rounded up to the next whole second); nothing executed.
	Fault503Date
	// Fault429: 429 with "Retry-After: <seconds>"; nothing executed.
	Fault429
	// FaultResetBeforeProcessing: the connection is reset (TCP RST) before anything is
	// read or executed. A client sees a transport error after it wrote the request.
	FaultResetBeforeProcessing
	// Fault502BeforeProcessing: 502, as from a proxy that could not reach the server;
	// nothing executed.
	Fault502BeforeProcessing
	// FaultDropAfterCommit: the payment is executed and its 201 stored, then the
	// connection is reset instead of answering.
	FaultDropAfterCommit
	// FaultSlow: the key is claimed (status says processing, a concurrent resend gets 409),
	// the request waits Config.SlowDelay even if the client hangs up, then executes, stores
	// and answers 201.
	FaultSlow
	// Fault500AfterCommit: the payment is executed and its 201 stored, but this answer is
	// 500 {"error":"internal"}; replays and the status endpoint report the 201.
	Fault500AfterCommit
	// FaultStored500: execution fails without a ledger entry and the 500 answer is stored
	// as the key's result (Stripe-style): every replay of the key is that 500, and the
	// status endpoint reports completed with response_status 500.
	FaultStored500
	// FaultStored500AfterCharge: the payment is executed (a ledger entry, a charge the
	// search by reference lists), then a 500 is stored as the key's result: every replay of
	// the key is that 500 and the status endpoint reports completed with response_status
	// 500. A client cannot tell it from FaultStored500; only a business lookup can.
	FaultStored500AfterCharge

	numFaults // keep last
)

var faultNames = [numFaults]string{
	FaultNone:                  "none",
	Fault503:                   "503",
	Fault503Date:               "503-date",
	Fault429:                   "429",
	FaultResetBeforeProcessing: "reset-before-processing",
	Fault502BeforeProcessing:   "502-before-processing",
	FaultDropAfterCommit:       "drop-after-commit",
	FaultSlow:                  "slow",
	Fault500AfterCommit:        "500-after-commit",
	FaultStored500:             "stored-500",
	FaultStored500AfterCharge:  "stored-500-after-charge",
}

// String returns the fault's short name, such as "drop-after-commit".
func (f Fault) String() string {
	if f.valid() {
		return faultNames[f]
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

func (f Fault) valid() bool { return f >= 0 && f < numFaults }

// BeforeProcessing reports whether f strikes before the key is claimed, so that the
// request is never executed: 503, 503-date, 429, reset and 502.
func (f Fault) BeforeProcessing() bool {
	switch f {
	case Fault503, Fault503Date, Fault429, FaultResetBeforeProcessing, Fault502BeforeProcessing:
		return true
	}
	return false
}

// AllFaults returns every fault except FaultNone, in declaration order: the default list
// random faults are drawn from.
func AllFaults() []Fault {
	all := make([]Fault, 0, numFaults-1)
	for f := FaultNone + 1; f < numFaults; f++ {
		all = append(all, f)
	}
	return all
}

// Script appends faults to the FIFO that arriving POST requests consume, one each, before
// random faults are considered. FaultNone in the script serves one request normally. It
// panics on an unknown fault. Faults are taken in order of arrival, before a key is claimed:
// among concurrent requests for one key, the first to arrive need not be the one that claims
// it, so script FaultSlow for each of them to hold the claimer.
func (h *Handler) Script(faults ...Fault) {
	for _, f := range faults {
		if !f.valid() {
			panic(fmt.Sprintf("idemtest: Script: unknown fault %d", int(f)))
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.script = append(h.script, faults...)
}

// nextFaultLocked takes the fault for an arriving POST: scripted, else random, else none.
func (h *Handler) nextFaultLocked() Fault {
	if len(h.script) > 0 {
		f := h.script[0]
		h.script = h.script[1:]
		return f
	}
	if h.cfg.FaultRate > 0 && h.rng.Float64() < h.cfg.FaultRate {
		return h.cfg.Faults[h.rng.IntN(len(h.cfg.Faults))]
	}
	return FaultNone
}

// countFault records that f took effect.
func (h *Handler) countFault(f Fault) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stats.Faults[f]++
}

// injectBefore answers a request with a before-processing fault.
// In the adyen dialect every such answer carries "transient-error: true" (nothing executed).
func (h *Handler) injectBefore(w http.ResponseWriter, f Fault) {
	h.countFault(f)
	if h.dialect != nil && h.dialect.transient && f != FaultResetBeforeProcessing {
		w.Header().Set(TransientErrorHeader, "true")
	}
	switch f {
	case Fault503:
		w.Header().Set("Retry-After", h.retryAfter())
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: "service_unavailable"})
	case Fault503Date:
		w.Header().Set("Retry-After", retryDate(h.cfg.Now(), h.cfg.RetryAfter))
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: "service_unavailable"})
	case Fault429:
		w.Header().Set("Retry-After", h.retryAfter())
		writeJSON(w, http.StatusTooManyRequests, errorBody{Error: "rate_limited"})
	case Fault502BeforeProcessing:
		writeJSON(w, http.StatusBadGateway, errorBody{Error: "bad_gateway"})
	case FaultResetBeforeProcessing:
		resetConn(w)
	}
}

// retryDate is now + seconds as an HTTP-date, rounded up to a whole second so that a client
// never computes a shorter wait than asked.
func retryDate(now time.Time, seconds int) string {
	t := now.Add(time.Duration(seconds) * time.Second).UTC()
	if tr := t.Truncate(time.Second); !tr.Equal(t) {
		t = tr.Add(time.Second)
	}
	return t.Format(http.TimeFormat)
}

// resetConn aborts the request with a TCP reset: it hijacks the connection, sets linger 0
// and closes it, so that the peer gets RST instead of FIN. Where the connection cannot be
// hijacked (HTTP/2), it aborts the stream instead.
func resetConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}
