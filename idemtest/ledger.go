package idemtest

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Execution is one payment the server executed: one row of the ledger.
type Execution struct {
	ID        string    // payment id returned to the client, "pay_<n>"
	Tenant    string    // Authorization header value, "" if absent
	Path      string    // endpoint path; (Tenant, Path, Key) is the key's scope
	Key       string    // idempotency key, unquoted
	Reference string    // the request's optional reference
	Amount    int64     // minor units
	Currency  string    // ISO 4217 code
	Customer  string    // customer id
	At        time.Time // Config.Now at execution
	// Canceled is set by the adyen dialect's cancel by reference (POST /v1/cancels), which
	// cancels the tenant's charges carrying the reference, those still executing included.
	Canceled bool
	// CanceledAt is Config.Now when the charge was canceled; zero if it was not.
	CanceledAt time.Time
}

// Status is the charge's status as every dialect shows it: "succeeded" or "canceled".
func (e Execution) Status() string {
	if e.Canceled {
		return "canceled"
	}
	return "succeeded"
}

// Stats is a snapshot of the server's counters.
type Stats struct {
	Requests        int           // POST requests that arrived, faulted ones included
	Executions      int           // payments executed (ledger entries)
	Replays         int           // repeats answered from a key's record: replays, paypal's current state, gocardless's pointer
	InProgress      int           // in-progress answers (409): the key was still processing
	KeyReused       int           // key-reuse answers (422 idem and ietf, the dialect's code otherwise): another request
	BadRequests     int           // 400 and 413 answers: key or body invalid, nothing stored
	KeyStatusChecks int           // status endpoint requests, faulted ones included
	KeyStatusFaults int           // status checks answered 503 by KeyStatusFaultRate
	Searches        int           // searches and lists (by reference, metadata or key) answered
	Fetches         int           // GET <path>/{id} requests answered (paypal, gocardless)
	Cancels         int           // cancels by reference answered (adyen)
	Faults          map[Fault]int // faults that took effect, by kind
}

// String formats s on one line for a demo's summary; fetches and cancels only when not zero,
// then the faults in declaration order.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "requests=%d executions=%d replays=%d in_progress=%d key_reused=%d bad_requests=%d status_checks=%d status_faults=%d searches=%d",
		s.Requests, s.Executions, s.Replays, s.InProgress, s.KeyReused, s.BadRequests, s.KeyStatusChecks, s.KeyStatusFaults, s.Searches)
	if s.Fetches > 0 {
		fmt.Fprintf(&b, " fetches=%d", s.Fetches)
	}
	if s.Cancels > 0 {
		fmt.Fprintf(&b, " cancels=%d", s.Cancels)
	}
	for f := FaultNone + 1; f < numFaults; f++ {
		if n := s.Faults[f]; n > 0 {
			fmt.Fprintf(&b, " %s=%d", f, n)
		}
	}
	return b.String()
}

// Stats returns a snapshot of the counters.
func (h *Handler) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.stats
	s.Executions = len(h.executions)
	s.Faults = make(map[Fault]int, len(h.stats.Faults))
	for f, n := range h.stats.Faults {
		s.Faults[f] = n
	}
	return s
}

// Executions returns a copy of the ledger, in execution order.
func (h *Handler) Executions() []Execution {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Execution(nil), h.executions...)
}

// ExecutionsFor returns how many payments were executed with key, across tenants and paths.
func (h *Handler) ExecutionsFor(key string) int {
	return h.countExecutions(func(e *Execution) bool { return e.Key == key })
}

// ExecutionsByReference returns how many payments were executed with reference ref, across
// tenants, paths and keys: the exactly-once oracle per business payment.
func (h *Handler) ExecutionsByReference(ref string) int {
	return h.countExecutions(func(e *Execution) bool { return e.Reference == ref })
}

// ChargesByReference returns how many payments were executed with reference ref (charged)
// and how many of those were canceled since (canceled), across tenants, paths and keys.
// Exactly-once net of cancels is charged-canceled == 1; without cancels (every dialect but
// adyen) charged equals ExecutionsByReference(ref) and canceled is 0.
func (h *Handler) ChargesByReference(ref string) (charged, canceled int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.executions {
		if e := &h.executions[i]; e.Reference == ref {
			charged++
			if e.Canceled {
				canceled++
			}
		}
	}
	return charged, canceled
}

// ExecutionByID returns the ledger entry of the payment id ("pay_<n>") and true, or false
// if there is none.
func (h *Handler) ExecutionByID(id string) (Execution, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.executions {
		if e.ID == id {
			return e, true
		}
	}
	return Execution{}, false
}

func (h *Handler) countExecutions(match func(*Execution) bool) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for i := range h.executions {
		if match(&h.executions[i]) {
			n++
		}
	}
	return n
}

// Attempts returns how many POST requests arrived, faulted and invalid ones included.
func (h *Handler) Attempts() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stats.Requests
}

// AttemptsFor returns how many POST requests carried key (unquoted), counted on arrival
// across tenants and paths, faulted ones included.
func (h *Handler) AttemptsFor(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.attemptsFor[key]
}

// KeyStatusChecks returns how many status endpoint requests arrived, faulted ones included.
func (h *Handler) KeyStatusChecks() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stats.KeyStatusChecks
}

// charge appends the payment to the ledger and returns its id. arrival is the request's
// arrival sequence: a cancel of the reference after it arrived cancels the charge at once.
func (h *Handler) charge(tenant, path, key string, req paymentRequest, arrival uint64) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.chargeLocked(tenant, path, key, req, arrival)
}

func (h *Handler) chargeLocked(tenant, path, key string, req paymentRequest, arrival uint64) string {
	id := "pay_" + strconv.Itoa(len(h.executions)+1)
	e := Execution{
		ID: id, Tenant: tenant, Path: path, Key: key, Reference: req.Reference,
		Amount: req.Amount, Currency: req.Currency, Customer: req.Customer, At: h.cfg.Now(),
	}
	if seq, ok := h.cancels[cancelScope{tenant, req.Reference}]; ok && seq > arrival {
		e.Canceled, e.CanceledAt = true, e.At
	}
	h.executions = append(h.executions, e)
	return id
}

// paymentOf is the charge's JSON in every dialect.
func paymentOf(e *Execution) payment {
	return payment{ID: e.ID, Amount: e.Amount, Currency: e.Currency, Customer: e.Customer,
		Reference: e.Reference, Status: e.Status()}
}
