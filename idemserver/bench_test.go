package idemserver_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idemkit/idem/idemserver"
)

var (
	benchBody    = []byte(`{"amount":1999,"currency":"eur","customer":"cus_9s6XKzkNRiz8i3","description":"order 4711"}`)
	benchCreated = []byte(`{"id":"pay_3MtwBwLkdIwHu7ix28a3tqPa","status":"succeeded"}`)
)

// BenchmarkMiddlewareOverhead measures one POST of a ~100-byte JSON body over loopback to a
// handler answering 201, both variants sending a fresh random UUIDv4 Idempotency-Key:
//
//   - bare: the handler alone (reads the body, answers);
//   - idemserver: the same handler behind the middleware on the memory backend: key parse,
//     tenant, body read and canonical-JSON fingerprint, claim, buffered answer, stored answer.
//
// Target: idemserver <= 1.3x bare ns/op. The memory backend keeps every answer for the
// retention window, so the heap grows with b.N.
func BenchmarkMiddlewareOverhead(b *testing.B) {
	bare, idem := benchHandlers(b)
	for _, v := range []struct {
		name string
		h    http.Handler
	}{{"bare", bare}, {"idemserver", idem}} {
		b.Run(v.name, func(b *testing.B) {
			srv := httptest.NewServer(v.h)
			defer srv.Close()
			hc := srv.Client()
			b.ReportAllocs()
			for b.Loop() {
				benchPost(b, hc, srv.URL)
			}
		})
	}
}

// BenchmarkMiddlewareOverheadRatio sends BenchmarkMiddlewareOverhead's two variants
// alternately, one request each per iteration, each to its own loopback server, and reports
// both times and their ratio: on a shared machine drift then hits both alike.
func BenchmarkMiddlewareOverheadRatio(b *testing.B) {
	bare, idem := benchHandlers(b)
	sb, si := httptest.NewServer(bare), httptest.NewServer(idem)
	defer sb.Close()
	defer si.Close()
	var tb, ti time.Duration
	for b.Loop() {
		t0 := time.Now()
		benchPost(b, sb.Client(), sb.URL)
		t1 := time.Now()
		benchPost(b, si.Client(), si.URL)
		tb, ti = tb+t1.Sub(t0), ti+time.Since(t1)
	}
	b.ReportMetric(float64(tb.Nanoseconds())/float64(b.N), "bare-ns/req")
	b.ReportMetric(float64(ti.Nanoseconds())/float64(b.N), "idemserver-ns/req")
	b.ReportMetric(float64(ti)/float64(tb), "ratio")
}

func benchHandlers(b testing.TB) (bare, idem http.Handler) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(benchCreated)
	})
	mw, err := idemserver.New(idemserver.Config{Backend: idemserver.NewMemory(),
		Tenant: func(r *http.Request) (string, error) {
			if r.Header.Get("Authorization") == "" {
				return "", errors.New("unauthenticated")
			}
			return "acct_1", nil
		}})
	if err != nil {
		b.Fatal(err)
	}
	return handler, mw.Handler(handler)
}

func benchPost(b *testing.B, hc *http.Client, url string) {
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/payments", bytes.NewReader(benchBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk_test")
	req.Header.Set("Idempotency-Key", uuid.NewString())
	resp, err := hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b.Fatalf("status %d", resp.StatusCode)
	}
}

// BenchmarkMiddlewareInProcess calls the two variants' ServeHTTP directly with a recorder,
// alternately, and reports both times and their ratio: the middleware's own CPU per request,
// undiluted by the round trip.
func BenchmarkMiddlewareInProcess(b *testing.B) {
	bare, idem := benchHandlers(b)
	var tb, ti time.Duration
	b.ReportAllocs()
	for b.Loop() {
		key := uuid.NewString()
		t0 := time.Now()
		serveOnce(b, bare, key)
		t1 := time.Now()
		serveOnce(b, idem, key)
		tb, ti = tb+t1.Sub(t0), ti+time.Since(t1)
	}
	b.ReportMetric(float64(tb.Nanoseconds())/float64(b.N), "bare-ns/req")
	b.ReportMetric(float64(ti.Nanoseconds())/float64(b.N), "idemserver-ns/req")
	b.ReportMetric(float64(ti-tb)/float64(b.N), "added-ns/req")
	b.ReportMetric(float64(ti)/float64(tb), "ratio")
	b.StopTimer()
	bareAllocs, idemAllocs := inProcessAllocs(b)
	b.ReportMetric(bareAllocs, "bare-allocs/req")
	b.ReportMetric(idemAllocs, "idemserver-allocs/req")
}

func serveOnce(b testing.TB, h http.Handler, key string) {
	req := httptest.NewRequest(http.MethodPost, "/v1/payments", bytes.NewReader(benchBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk_test")
	req.Header.Set("Idempotency-Key", key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated {
		b.Fatalf("status %d", rec.Code)
	}
}

// inProcessAllocs returns the allocations of one in-process request (serveOnce) to the bare
// handler and to the middleware, each with a fresh key made beforehand.
func inProcessAllocs(tb testing.TB) (bare, idem float64) {
	bareH, idemH := benchHandlers(tb)
	const runs = 200
	keys := make([]string, 2*(runs+1))
	for i := range keys {
		keys[i] = uuid.NewString()
	}
	i := 0
	measure := func(h http.Handler) float64 {
		return testing.AllocsPerRun(runs, func() {
			serveOnce(tb, h, keys[i])
			i++
		})
	}
	return measure(bareH), measure(idemH)
}

// maxInProcessAllocs bounds the allocations of one in-process request through the middleware
// on the memory backend (TestMiddlewareAllocations), the test's own request and recorder
// included; see docs/PERFORMANCE.md, section i.
const maxInProcessAllocs = 33

// TestMiddlewareAllocations holds the middleware's in-process allocations to their budget, so
// that one more per request is a failure here rather than noise in a benchmark.
func TestMiddlewareAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts under the race detector are not the program's; run without -race")
	}
	bare, idem := inProcessAllocs(t)
	t.Logf("allocations per request: bare %.0f, idemserver %.0f", bare, idem)
	if idem > maxInProcessAllocs {
		t.Errorf("idemserver: %.0f allocations per request, the budget is %d (bare handler: %.0f)", idem, maxInProcessAllocs, bare)
	}
}

// BenchmarkMiddlewareInProcessStore splits BenchmarkMiddlewareInProcess's added time between
// the middleware and the memory backend: the same three-way loop (bare handler; middleware on
// NewMemory; middleware on forgetBackend, which claims every key and keeps nothing) reports
// each one's time and both middlewares' ratios to the bare handler. What NewMemory adds over
// forgetBackend is the cost of keeping every answer for the retention window: its map grows
// with b.N, and the collector marks what it holds.
func BenchmarkMiddlewareInProcessStore(b *testing.B) {
	bare, idem := benchHandlers(b)
	mw, err := idemserver.New(idemserver.Config{Backend: forgetBackend{}, Tenant: func(*http.Request) (string, error) { return "acct_1", nil }})
	if err != nil {
		b.Fatal(err)
	}
	forget := mw.Handler(bare)
	var tb, ti, tf time.Duration
	for b.Loop() {
		key := uuid.NewString()
		t0 := time.Now()
		serveOnce(b, bare, key)
		t1 := time.Now()
		serveOnce(b, idem, key)
		t2 := time.Now()
		serveOnce(b, forget, key)
		tb, ti, tf = tb+t1.Sub(t0), ti+t2.Sub(t1), tf+time.Since(t2)
	}
	b.ReportMetric(float64(tb.Nanoseconds())/float64(b.N), "bare-ns/req")
	b.ReportMetric(float64(ti.Nanoseconds())/float64(b.N), "memory-ns/req")
	b.ReportMetric(float64(tf.Nanoseconds())/float64(b.N), "forget-ns/req")
	b.ReportMetric(float64(ti)/float64(tb), "memory-ratio")
	b.ReportMetric(float64(tf)/float64(tb), "forget-ratio")
}

// forgetBackend claims every key and keeps nothing: the middleware's own cost, without a
// store's (BenchmarkMiddlewareInProcessStore). Not a Backend for anything else.
type forgetBackend struct{}

func (forgetBackend) Claim(context.Context, idemserver.ClaimRequest) (idemserver.Claim, *idemserver.Record, error) {
	return forgetClaim{}, nil, nil
}
func (forgetBackend) Lookup(context.Context, idemserver.Scope, time.Time) (*idemserver.Record, error) {
	return nil, nil
}
func (forgetBackend) Purge(context.Context, time.Time, int) (int, error) { return 0, nil }

type forgetClaim struct{}

func (forgetClaim) Context(ctx context.Context) context.Context { return ctx }
func (forgetClaim) RecoveryPoint() string                       { return "" }
func (forgetClaim) ExpiredReuse() bool                          { return false }
func (forgetClaim) Checkpoint(context.Context, string, time.Time, time.Duration) error {
	return nil
}
func (forgetClaim) Complete(context.Context, *idemserver.Response, time.Time, time.Time) error {
	return nil
}
func (forgetClaim) Release(context.Context) error { return nil }
