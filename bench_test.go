package idem_test

// Benchmarks of docs/PERFORMANCE.md, each with its baseline in the same run. They run only with
// -bench (go test ./... compiles them and runs none); docs/bench.sh runs them all and
// docs/PERFORMANCE.md holds the figures. Servers are httptest servers on loopback.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/go-retryablehttp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// benchBody is the ~100-byte JSON payment every overhead and amplification request sends.
var benchBody = []byte(`{"amount":1000,"currency":"eur","customer":"cus_9s6XKzkNRiz8i3","description":"order 4242-4242"}`)

const benchPath = "/v1/payments"

// benchKey is the constant Idempotency-Key the baselines send, so that every variant puts
// the same header on the wire; idem mints a fresh UUIDv7 per operation, and that cost is
// counted against idem.
const benchKey = "5f0c6a2e-8d1b-4c3a-9e7f-000000000000"

var createdBody = []byte(`{"id":"pay_3MtwBwLkdIwHu7ix28a3tqPa","status":"succeeded"}`)

// BenchmarkOverhead measures one successful POST of a ~100-byte JSON body to a loopback
// server answering 201 with a small body, three ways over one shared pooled transport
// (cleanhttp.DefaultPooledClient), so that connection reuse is identical:
//
//   - net/http: http.Client.Do, body read and closed;
//   - retryablehttp: go-retryablehttp with its defaults (Logger nil: its default logger
//     writes a line to stderr per request), body read and closed;
//   - idem: Client.Do of a new Operation (UUIDv7 key minted per call) with keystore.Memory,
//     the default retry budget and no status URL: lookup (Get), Create, the request,
//     Update of the final state. The Memory store keeps every record (Recover purges), so
//     the heap grows with b.N: docs/bench.sh fixes -benchtime to 20000x.
//
// Target: idem <= 1.2x retryablehttp ns/op.
func BenchmarkOverhead(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(createdBody)
	}))
	defer srv.Close()
	hc := cleanhttp.DefaultPooledClient()
	defer hc.CloseIdleConnections()
	overhead(b, hc, srv.URL)
}

// BenchmarkOverheadInProcess runs BenchmarkOverhead's three variants over an in-process
// RoundTripper that answers the same 201 without any network or server, so ns/op is the
// client's own cost per call: what idem adds shows undiluted by the round trip.
func BenchmarkOverheadInProcess(b *testing.B) {
	overhead(b, &http.Client{Transport: cannedTransport{}}, "http://api.example")
}

// cannedTransport answers every request 201 with the body BenchmarkOverhead's server sends.
type cannedTransport struct{}

func (cannedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	return &http.Response{Status: "201 Created", StatusCode: http.StatusCreated,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(createdBody))}},
		Body:          io.NopCloser(bytes.NewReader(createdBody)),
		ContentLength: int64(len(createdBody)), Request: r}, nil
}

func overhead(b *testing.B, hc *http.Client, base string) {
	url := base + benchPath
	b.Run("net/http", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(benchBody))
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", benchKey)
			resp, err := hc.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusCreated {
				b.Fatal(resp.StatusCode, err)
			}
		}
	})

	b.Run("retryablehttp", func(b *testing.B) {
		rc := retryablehttp.NewClient()
		rc.HTTPClient, rc.Logger = hc, nil
		b.ReportAllocs()
		for b.Loop() {
			req, err := retryablehttp.NewRequest(http.MethodPost, url, benchBody)
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", benchKey)
			resp, err := rc.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusCreated {
				b.Fatal(resp.StatusCode, err)
			}
		}
	})

	b.Run("idem", func(b *testing.B) {
		c, err := idem.NewClient(idem.Config{BaseURL: base, HTTPClient: hc, Store: keystore.NewMemory()})
		if err != nil {
			b.Fatal(err)
		}
		// An open client stays reachable (its purge loop) with every record it kept, and the
		// next run's collector would mark them all.
		defer c.Close()
		ctx := b.Context()
		hdr := http.Header{"Content-Type": {"application/json"}}
		b.ReportAllocs()
		for b.Loop() {
			res, err := c.Do(ctx, idem.NewOperation(http.MethodPost, benchPath, benchBody, idem.WithHeader(hdr)))
			if err != nil {
				b.Fatal(err)
			}
			if res.StatusCode != http.StatusCreated || res.Attempts != 1 {
				b.Fatalf("%d after %d attempts", res.StatusCode, res.Attempts)
			}
		}
	})
}

// downServer answers 503 with Retry-After: 0 to everything and counts the requests.
func downServer(b *testing.B) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	b.Cleanup(srv.Close)
	return srv, &n
}

func noSleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// BenchmarkAmplification measures retry amplification while the server is fully down (503,
// Retry-After: 0, to every request): requests the server receives per call
// (attempts/call).
//
//   - retryablehttp-defaults: retryablehttp.NewClient() defaults, RetryMax 4 included; only
//     RetryWaitMin/RetryWaitMax are shrunk to 1µs (and Logger nil) so the benchmark does not
//     sleep. Expect 5.
//   - idem-no-budget: Budget Disabled, MaxAttempts 5, Config.Sleep returning at once. Expect 5.
//   - idem-budget: the default budget (500 tokens, 5 per retry) and Config.Sleep returning at
//     once. A fresh client first drains its bucket in an untimed warm-up, reported as
//     drain-calls and drain-attempts/call; attempts/call is then measured over the timed
//     calls, made with the budget spent: the steady state of an outage. Target <= 1.1.
func BenchmarkAmplification(b *testing.B) {
	hc := cleanhttp.DefaultPooledClient()
	defer hc.CloseIdleConnections()

	b.Run("retryablehttp-defaults", func(b *testing.B) {
		srv, hits := downServer(b)
		rc := retryablehttp.NewClient()
		rc.HTTPClient, rc.Logger = hc, nil
		rc.RetryWaitMin, rc.RetryWaitMax = time.Microsecond, time.Microsecond
		var calls int64
		for b.Loop() {
			req, err := retryablehttp.NewRequest(http.MethodPost, srv.URL+benchPath, benchBody)
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Idempotency-Key", benchKey)
			resp, err := rc.Do(req)
			if err == nil {
				resp.Body.Close()
				b.Fatal("a down server answered")
			}
			calls++
		}
		b.ReportMetric(float64(hits.Load())/float64(calls), "attempts/call")
	})

	idemCall := func(b *testing.B, c *idem.Client, want error) {
		_, err := c.Do(b.Context(), idem.NewOperation(http.MethodPost, benchPath, benchBody))
		if !errors.Is(err, want) {
			b.Fatalf("got %v, want %v", err, want)
		}
	}

	b.Run("idem-no-budget", func(b *testing.B) {
		srv, hits := downServer(b)
		c, err := idem.NewClient(idem.Config{BaseURL: srv.URL, HTTPClient: hc, Store: keystore.NewMemory(),
			Budget: idem.BudgetConfig{Disabled: true}, Policy: idem.Policy{MaxAttempts: 5}, Sleep: noSleep})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		var calls int64
		for b.Loop() {
			idemCall(b, c, idem.ErrExhausted)
			calls++
		}
		b.ReportMetric(float64(hits.Load())/float64(calls), "attempts/call")
	})

	b.Run("idem-budget", func(b *testing.B) {
		srv, hits := downServer(b)
		c, err := idem.NewClient(idem.Config{BaseURL: srv.URL, HTTPClient: hc, Store: keystore.NewMemory(),
			Sleep: noSleep})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		// Warm-up: the outage begins with a full bucket; calls retry until it is spent.
		var drainCalls int64
		for c.Stats().BudgetAvailable >= 5 /* the default retry cost */ {
			_, _ = c.Do(b.Context(), idem.NewOperation(http.MethodPost, benchPath, benchBody))
			drainCalls++
		}
		drainAttempts := hits.Load()
		var calls int64
		for b.Loop() { // the first b.Loop call resets the timer: the warm-up is not timed
			idemCall(b, c, idem.ErrBudgetExhausted)
			calls++
		}
		b.ReportMetric(float64(hits.Load()-drainAttempts)/float64(calls), "attempts/call")
		b.ReportMetric(float64(drainCalls), "drain-calls")
		b.ReportMetric(float64(drainAttempts)/float64(drainCalls), "drain-attempts/call")
	})
}

// recoverRecords is how many pending records BenchmarkRecover reconciles.
const recoverRecords = 10_000

// BenchmarkRecover measures reconciliation of 10,000 pending records of a bbolt keystore
// (boltstore in b.TempDir()) against a loopback status endpoint that answers 200 completed
// for every key: per record one status GET and one durable Update, 16 at a time. The records
// are created before the timer starts (64 concurrent Creates sharing commits). Run it with
// -benchtime=1x: one iteration reconciles 10,000 records and its setup takes seconds.
// Reports records/s and conns/record (TCP connections the server accepted per record).
//
//   - baseline: the least any reconciler must do, by hand: List the pending records, then
//     16 workers each GET the status (an HTTP client keeping 16 idle connections), decode it
//     and Update the record to succeeded.
//   - idem: Client.Recover with idem's defaults (Config.HTTPClient nil: a go-cleanhttp pooled
//     client; RecoverConcurrency 16). Target >= 2,000 records/s.
//   - idem-pool16: the same with Config.HTTPClient keeping 16 idle connections per host, as
//     the baseline does.
func BenchmarkRecover(b *testing.B) {
	var checks, sends, conns atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/payments/operations/{key}", func(w http.ResponseWriter, r *http.Request) {
		checks.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"status":"completed","response_status":201,"response_body":{"id":"pay_%s"}}`, r.PathValue("key"))
	})
	mux.HandleFunc("POST "+benchPath, func(w http.ResponseWriter, r *http.Request) {
		sends.Add(1) // a completed key must never be resent
		w.WriteHeader(http.StatusCreated)
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	pool16 := func() *http.Client {
		hc := cleanhttp.DefaultPooledClient()
		hc.Transport.(*http.Transport).MaxIdleConnsPerHost = 16
		return hc
	}

	run := func(b *testing.B, reconcile func(ctx context.Context, store keystore.Store) (int, error)) {
		var elapsed time.Duration
		var total int
		checks.Store(0)
		sends.Store(0)
		conns.Store(0)
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			store, err := boltstore.Open(filepath.Join(b.TempDir(), fmt.Sprintf("recover-%d.db", i)), nil)
			if err != nil {
				b.Fatal(err)
			}
			createPending(b, store, recoverRecords)
			b.StartTimer()
			start := time.Now()
			n, err := reconcile(b.Context(), store)
			elapsed += time.Since(start)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if n != recoverRecords {
				b.Fatalf("%d records reconciled, want %d", n, recoverRecords)
			}
			if left, err := store.List(b.Context(), keystore.StatePending); err != nil || len(left) != 0 {
				b.Fatalf("%d records still pending (%v)", len(left), err)
			}
			total += n
			if err := store.Close(); err != nil {
				b.Fatal(err)
			}
		}
		if sends.Load() != 0 || checks.Load() != int64(total) {
			b.Fatalf("%d resends and %d status checks for %d records", sends.Load(), checks.Load(), total)
		}
		b.ReportMetric(float64(total)/elapsed.Seconds(), "records/s")
		b.ReportMetric(float64(conns.Load())/float64(total), "conns/record")
	}

	b.Run("baseline", func(b *testing.B) {
		hc := pool16()
		defer hc.CloseIdleConnections()
		run(b, func(ctx context.Context, store keystore.Store) (int, error) {
			return reconcileByHand(ctx, store, hc, srv.URL)
		})
	})
	idemRecover := func(b *testing.B, hc *http.Client) {
		run(b, func(ctx context.Context, store keystore.Store) (int, error) {
			c, err := idem.NewClient(idem.Config{BaseURL: srv.URL, Store: store, HTTPClient: hc,
				KeyStatusURL: "/v1/payments/operations/{key}"})
			if err != nil {
				return 0, err
			}
			defer c.Close()
			rep, err := c.Recover(ctx, nil)
			if rep.Pending != rep.Succeeded {
				return rep.Succeeded, fmt.Errorf("report %+v: not every pending record succeeded", rep)
			}
			return rep.Succeeded, err
		})
	}
	b.Run("idem", func(b *testing.B) { idemRecover(b, nil) })
	b.Run("idem-pool16", func(b *testing.B) {
		hc := pool16()
		defer hc.CloseIdleConnections()
		idemRecover(b, hc)
	})
}

// reconcileByHand is BenchmarkRecover's baseline: what any reconciler must do per pending
// record (a status GET and a durable Update), 16 records at a time, without idem.
func reconcileByHand(ctx context.Context, store keystore.Store, hc *http.Client, base string) (int, error) {
	pending, err := store.List(ctx, keystore.StatePending)
	if err != nil {
		return 0, err
	}
	work := make(chan *keystore.Record)
	var done atomic.Int64
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for rec := range work {
				if err := reconcileOne(ctx, store, hc, base, rec); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					continue
				}
				done.Add(1)
			}
		})
	}
	for _, rec := range pending {
		work <- rec
	}
	close(work)
	wg.Wait()
	return int(done.Load()), errors.Join(errs...)
}

func reconcileOne(ctx context.Context, store keystore.Store, hc *http.Client, base string, rec *keystore.Record) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/payments/operations/"+url.PathEscape(rec.Key), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Idempotency-Key", rec.Key)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	var st struct {
		Status         string          `json:"status"`
		ResponseStatus int             `json:"response_status"`
		ResponseBody   json.RawMessage `json:"response_body"`
	}
	if err := json.Unmarshal(body, &st); err != nil || resp.StatusCode != http.StatusOK || st.Status != "completed" {
		return fmt.Errorf("status of %s: %d %s (%v)", rec.Key, resp.StatusCode, body, err)
	}
	rec.State, rec.LastStatusCode, rec.UpdatedAt = keystore.StateSucceeded, st.ResponseStatus, time.Now()
	rec.Response = &keystore.Response{StatusCode: st.ResponseStatus, Body: st.ResponseBody}
	return store.Update(ctx, rec)
}

// createPending persists n pending records the way Do does before its first send, from 64
// goroutines so that they share commits.
func createPending(b *testing.B, store keystore.Store, n int) {
	ctx := b.Context()
	created := time.Now()
	fp := idem.Fingerprint(http.MethodPost, benchPath, benchBody)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				key := uuid.NewString()
				rec := &keystore.Record{
					Key: key, Fingerprint: fp, State: keystore.StatePending, Attempts: 1,
					Request: keystore.Request{Method: http.MethodPost, URL: benchPath,
						Header: http.Header{"Content-Type": {"application/json"}}, Body: benchBody},
					CreatedAt: created, UpdatedAt: created,
				}
				if err := store.Create(ctx, rec); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}
