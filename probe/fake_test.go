package probe_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// fake is a payments API with its own idempotency store and one deliberate fault per knob,
// and its own ledger (the oracle the probe's verdicts are checked against). The zero value
// honours the contract: a key is claimed under a lock, executed once, its answer stored and
// replayed with Idempotent-Replayed; another body under a used key is 422; a key still
// executing is 409 with Retry-After; a status endpoint and a search by reference.
type fake struct {
	noIdempotency bool          // every POST executes: a server that re-executes on retry
	noLock        bool          // keys are stored after execution but not claimed: concurrent requests all execute
	reuseReplay   bool          // another body under a used key replays the first answer (no fingerprint)
	noStatus      bool          // no status endpoint
	noSearch      bool          // no search by reference
	emptySearch   bool          // the search by reference answers 200 and lists nothing
	markFirst     bool          // first answers also carry Idempotent-Replayed: true
	hiddenCharge  bool          // a repeat of a key charges again, then replays
	reuse422      bool          // any key seen before gets 422 key reuse: never replays
	conflictCode  string        // the key-reuse 422's {"code":...}; "" means {"error":"idempotency_key_reused"}
	stripeReuse   bool          // key reuse answered as Stripe does: 400, error type idempotency_error
	unstored5xx   float64       // rate of executions that charge, then answer 500 and store nothing
	stored5xx     float64       // rate of executions that charge, then store and answer 500 (correct)
	every500      bool          // every execution charges, then stores and answers 500
	hold          time.Duration // the in-progress bursts' executions take this long
	burstAt       int           // the POST arrival the bursts start at (default 4: after create, replay, key reuse)
	burstLen      int           // how many arrivals are held (default 8: the first burst)
	throttleOnce  string        // the first POST gets 429 with this Retry-After, if set
	seed          int64         // seeds the 5xx rates

	mu        sync.Mutex
	rng       *rand.Rand
	arrivals  int
	charges   []string // references, in execution order
	keys      map[string]*entry
	throttled bool
}

type entry struct {
	body   string // the request body (fingerprint)
	done   bool
	status int
	answer []byte
}

func (f *fake) charge(ref string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.charges = append(f.charges, ref)
	return fmt.Sprintf("ch_%d", len(f.charges))
}

func (f *fake) count(ref string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.charges {
		if r == ref {
			n++
		}
	}
	return n
}

// total is every charge the fake made.
func (f *fake) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.charges)
}

// maxPerReference is the most charges any reference got.
func (f *fake) maxPerReference() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	per, most := map[string]int{}, 0
	for _, r := range f.charges {
		per[r]++
		most = max(most, per[r])
	}
	return most
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

func (f *fake) post(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var req struct{ Reference string }
	_ = json.Unmarshal(b, &req)
	key := r.Header.Get("Idempotency-Key")
	f.mu.Lock()
	f.arrivals++
	arrival := f.arrivals
	if f.throttleOnce != "" && !f.throttled {
		f.throttled = true
		f.mu.Unlock()
		w.Header().Set("Retry-After", f.throttleOnce)
		writeJSON(w, http.StatusTooManyRequests, `{"error":"rate_limited"}`)
		return
	}
	e := f.keys[key]
	if f.noIdempotency {
		e = nil
	}
	switch {
	case e != nil && f.reuse422:
		f.mu.Unlock()
		writeJSON(w, http.StatusUnprocessableEntity, `{"error":"idempotency_key_reused"}`)
		return
	case e != nil && e.body != string(b) && !f.reuseReplay:
		f.mu.Unlock()
		switch {
		case f.stripeReuse:
			writeJSON(w, http.StatusBadRequest, `{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters they were first used with."}}`)
		case f.conflictCode != "":
			writeJSON(w, http.StatusUnprocessableEntity, fmt.Sprintf(`{"code":%q}`, f.conflictCode))
		default:
			writeJSON(w, http.StatusUnprocessableEntity, `{"error":"idempotency_key_reused"}`)
		}
		return
	case e != nil && !e.done:
		f.mu.Unlock()
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusConflict, `{"error":"request_in_progress"}`)
		return
	case e != nil:
		f.mu.Unlock()
		if f.hiddenCharge {
			f.charge(req.Reference)
		}
		w.Header().Set("Idempotent-Replayed", "true")
		writeJSON(w, e.status, string(e.answer))
		return
	}
	claim := &entry{body: string(b)}
	if !f.noLock && !f.noIdempotency {
		f.keys[key] = claim
	}
	draw := f.rng.Float64()
	f.mu.Unlock()

	if start := max(f.burstAt, 4); f.hold > 0 && arrival >= start && arrival < start+max(f.burstLen, 8) {
		time.Sleep(f.hold)
	}
	id := f.charge(req.Reference)
	answer := fmt.Sprintf(`{"id":%q,"reference":%q}`, id, req.Reference)
	status := http.StatusCreated
	switch {
	case draw < f.unstored5xx:
		f.mu.Lock()
		delete(f.keys, key) // the key is free again: a resend executes
		f.mu.Unlock()
		writeJSON(w, http.StatusInternalServerError, `{"error":"internal"}`)
		return
	case f.every500 || draw < f.stored5xx:
		status, answer = http.StatusInternalServerError, `{"error":"internal"}`
	}
	f.mu.Lock()
	claim.done, claim.status, claim.answer = true, status, []byte(answer)
	if !f.noIdempotency {
		f.keys[key] = claim
	}
	f.mu.Unlock()
	if f.markFirst {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, status, answer)
}

func (f *fake) status(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	e := f.keys[r.PathValue("key")]
	f.mu.Unlock()
	switch {
	case e == nil:
		writeJSON(w, http.StatusNotFound, `{"status":"not_found"}`)
	case !e.done:
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusAccepted, `{"status":"processing"}`)
	default:
		writeJSON(w, http.StatusOK, fmt.Sprintf(`{"status":"completed","response_status":%d}`, e.status))
	}
}

func (f *fake) search(w http.ResponseWriter, r *http.Request) {
	ref := r.URL.Query().Get("reference")
	data := []map[string]string{}
	for range f.count(ref) {
		if f.emptySearch {
			break
		}
		data = append(data, map[string]string{"reference": ref})
	}
	b, _ := json.Marshal(map[string]any{"data": data})
	writeJSON(w, http.StatusOK, string(b))
}

func (f *fake) start(t *testing.T) *httptest.Server {
	t.Helper()
	f.keys = map[string]*entry{}
	f.rng = rand.New(rand.NewSource(f.seed))
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/payments", f.post)
	if !f.noStatus {
		mux.HandleFunc("GET /v1/payments/operations/{key}", f.status)
	}
	if !f.noSearch {
		mux.HandleFunc("GET /v1/payments", f.search)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}
