package probe_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
)

// fake is a payments API built on idemserver with one deliberate fault per knob, and its own
// ledger (the oracle the probe's verdicts are checked against).
type fake struct {
	noIdempotency bool          // every POST executes: a server that re-executes on retry
	noStatus      bool          // no status endpoint
	hiddenCharge  bool          // every arrival charges before the middleware, which then replays
	reuse422      bool          // any key seen before gets 422 key reuse: never replays
	conflictCode  string        // the 422's code in {"code":...}; "" means idemserver's rendering
	stripeReuse   bool          // key reuse answered as Stripe does: 400, error type idempotency_error
	hold          time.Duration // each execution takes this long
	throttleOnce  string        // the first POST gets 429 with this Retry-After, if set

	mu        sync.Mutex
	charges   []string // references, in execution order
	seen      map[string]bool
	throttled bool
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

func (f *fake) start(t *testing.T) *httptest.Server {
	t.Helper()
	f.seen = map[string]bool{}
	cfg := idemserver.Config{Backend: idemserver.NewMemory(), Tenant: func(*http.Request) (string, error) { return "acct", nil }}
	if f.conflictCode != "" {
		cfg.WriteProblem = func(w http.ResponseWriter, r *http.Request, p idemserver.Problem) {
			if p.Type == idemserver.ProblemKeyReused {
				p.Code = f.conflictCode
				p.Type = "about:blank"
				p.Title = "Unprocessable"
			}
			idemserver.WriteProblemJSON(w, p)
		}
	}
	if f.stripeReuse {
		cfg.WriteProblem = func(w http.ResponseWriter, r *http.Request, p idemserver.Problem) {
			if p.Type != idemserver.ProblemKeyReused {
				idemserver.WriteProblemJSON(w, p)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters they were first used with."}}`)
		}
	}
	mw, err := idemserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Reference string }
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &req)
		time.Sleep(f.hold)
		id := f.charge(req.Reference)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q,"reference":%q}`, id, req.Reference)
	})
	var post http.Handler = mw.Handler(pay)
	if f.noIdempotency {
		post = pay
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/payments", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		throttle := f.throttleOnce != "" && !f.throttled
		f.throttled = f.throttled || throttle
		key := r.Header.Get("Idempotency-Key")
		reused := f.seen[key]
		f.seen[key] = true
		f.mu.Unlock()
		if throttle {
			w.Header().Set("Retry-After", f.throttleOnce)
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		if f.reuse422 && reused {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnprocessableEntity)
			io.WriteString(w, `{"error":"idempotency_key_reused"}`)
			return
		}
		if f.hiddenCharge && reused { // a retry charges again, then the middleware replays
			b, _ := io.ReadAll(r.Body)
			var req struct{ Reference string }
			_ = json.Unmarshal(b, &req)
			f.charge(req.Reference)
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		post.ServeHTTP(w, r)
	})
	if !f.noStatus {
		mux.Handle("GET /v1/payments/operations/{key}", mw.KeyStatusHandler("POST /v1/payments", nil))
	}
	mux.HandleFunc("GET /v1/payments", func(w http.ResponseWriter, r *http.Request) {
		ref := r.URL.Query().Get("reference")
		data := []map[string]string{}
		for range f.count(ref) {
			data = append(data, map[string]string{"reference": ref})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}
