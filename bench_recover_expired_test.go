package idem_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-cleanhttp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// BenchmarkRecoverExpired is the restart after an outage: N pending bbolt records left by an
// instance that died, their leases expired an hour ago, reconciled by Recover (a status GET
// and a durable write per record) while one caller keeps making durable Do calls on the same
// client and store. One iteration is one Recover of N records; run it with -benchtime 1x.
// It reports records/s, and the Do calls' p99 latency during the Recover against their p99
// over the same number of calls just before it (p99-ratio: the target is at most 2), and the
// caller's calls per second before and during it (the inverse of its mean latency), and the
// process's CPU time during it per record (cpu-µs/record). The
// sizes are IDEM_BENCH_RECOVER_SIZES (comma-separated, default "10000,100000"). The records
// are made with Create from 256 goroutines (the group commit takes many at once) under
// UUIDv7 keys of their CreatedAt, as NewOperation mints them, so records created together
// share pages of the file: 100,000 set up in 2.8 s at load average 3, 1,000,000 in 87 s at
// load average 10 (logged).
// IDEM_BENCH_RECOVER_KEYS=v4 uses random UUIDv4 keys instead, the worst case, where every
// claim and final write rewrites a page of its own; setting up 1,000,000 of them takes
// several minutes. IDEM_BENCH_RECOVER_BUSY_RATE and IDEM_BENCH_RECOVER_CONCURRENCY set
// Config.RecoverBusyRate and Config.RecoverConcurrency (default: the Config defaults), to
// measure the pace's trade-off between records/s and the calls' p99 from one binary.
func BenchmarkRecoverExpired(b *testing.B) {
	sizes := []int{10_000, 100_000}
	busyRate := benchEnvInt(b, "IDEM_BENCH_RECOVER_BUSY_RATE")
	concurrency := benchEnvInt(b, "IDEM_BENCH_RECOVER_CONCURRENCY")
	if env := os.Getenv("IDEM_BENCH_RECOVER_SIZES"); env != "" {
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("IDEM_BENCH_RECOVER_SIZES: %q is not a count", f)
			}
			sizes = append(sizes, n)
		}
	}
	var sends atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/payments/operations/{key}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"status":"completed","response_status":201,"response_body":{"id":"pay_%s"}}`, r.PathValue("key"))
	})
	mux.HandleFunc("POST "+benchPath, func(w http.ResponseWriter, r *http.Request) {
		sends.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(createdBody)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	hc := cleanhttp.DefaultPooledClient()
	hc.Transport.(*http.Transport).MaxIdleConnsPerHost = 32
	defer hc.CloseIdleConnections()

	for _, n := range sizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			const quiet = 2000
			var elapsed, quietTime, cpuTime time.Duration
			var total int
			var before, during []time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				store, err := boltstore.Open(filepath.Join(b.TempDir(), fmt.Sprintf("recover-%d.db", i)), nil)
				if err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				createOrphans(b, store, n)
				b.Logf("setup of %d records: %v", n, time.Since(t0))
				cl, err := idem.NewClient(idem.Config{BaseURL: srv.URL, Store: store, HTTPClient: hc,
					KeyStatusURL:    "/v1/payments/operations/{key}",
					RecoverBusyRate: busyRate, RecoverConcurrency: concurrency})
				if err != nil {
					b.Fatal(err)
				}
				ctx := b.Context()
				hdr := http.Header{"Content-Type": {"application/json"}}
				do := func() (time.Duration, error) {
					t0 := time.Now()
					_, err := cl.Do(ctx, idem.NewOperation(http.MethodPost, benchPath, benchBody, idem.WithHeader(hdr)))
					return time.Since(t0), err
				}
				// The same caller's latency just before the Recover, over quiet calls.
				sends.Store(0)
				q0 := time.Now()
				for range quiet {
					d, err := do()
					if err != nil {
						b.Fatal(err)
					}
					before = append(before, d)
				}
				quietTime += time.Since(q0)
				duringBefore := len(during)
				stop := make(chan struct{})
				var wg sync.WaitGroup
				var mu sync.Mutex
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						d, err := do()
						if err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						during = append(during, d)
						mu.Unlock()
					}
				})
				b.StartTimer()
				cpu0 := processCPU(b)
				start := time.Now()
				rep, err := cl.Recover(ctx, nil)
				elapsed += time.Since(start)
				cpuTime += processCPU(b) - cpu0
				b.StopTimer()
				close(stop)
				wg.Wait()
				if err != nil {
					b.Fatal(err)
				}
				if rep.Succeeded != n || rep.Pending-rep.Skipped != n { // Skipped: a Do in flight
					b.Fatalf("report %+v, want %d pending and succeeded", rep, n)
				}
				if s, calls := sends.Load(), quiet+len(during)-duringBefore; s != int64(calls) {
					b.Fatalf("%d sends for %d Do calls: a recovered record was resent", s, calls)
				}
				total += n
				if err := cl.Close(); err != nil {
					b.Fatal(err)
				}
				if err := store.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(total)/elapsed.Seconds(), "records/s")
			// The process's CPU time during the Recover per record (the caller's calls and
			// the in-process server included): what the pace spends of the cores, steadier
			// than the latencies when other jobs share the machine.
			b.ReportMetric(float64(cpuTime.Microseconds())/float64(total), "cpu-µs/record")
			pb, pd := p99(before), p99(during)
			b.ReportMetric(float64(pb.Microseconds()), "p99-before-µs")
			b.ReportMetric(float64(pd.Microseconds()), "p99-during-µs")
			b.ReportMetric(float64(pd)/float64(pb), "p99-ratio")
			b.ReportMetric(float64(len(during))/float64(b.N), "calls-during")
			// The one caller's calls per second before and during the Recover: its mean
			// latency's inverse, steadier than a p99 on a shared machine.
			b.ReportMetric(float64(quiet*b.N)/quietTime.Seconds(), "calls/s-before")
			b.ReportMetric(float64(len(during))/elapsed.Seconds(), "calls/s-during")
		})
	}
}

// processCPU returns the user and system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchEnvInt reads an integer setting of a benchmark from the environment: 0 when unset.
func benchEnvInt(b *testing.B, name string) int {
	env := os.Getenv(name)
	if env == "" {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(env))
	if err != nil {
		b.Fatalf("%s: %q is not an integer", name, env)
	}
	return n
}

// p99 returns the 99th percentile of d (sorted in place).
func p99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)*99/100]
}

// createOrphans creates n pending records left by an instance "dead" whose leases expired an
// hour ago, created 10 µs apart, from 128 goroutines (the group commit takes many
// at once).
func createOrphans(b *testing.B, store keystore.Store, n int) {
	ctx := context.Background()
	start := time.Now().Add(-2 * time.Hour)
	fp := idem.Fingerprint(http.MethodPost, benchPath, benchBody)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 256 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				created := start.Add(time.Duration(i) * time.Millisecond / 100)
				rec := &keystore.Record{
					Key: orphanKey(created), Fingerprint: fp, State: keystore.StatePending, Attempts: 1,
					Request: keystore.Request{Method: http.MethodPost, URL: benchPath,
						Header: http.Header{"Content-Type": {"application/json"}}, Body: benchBody},
					CreatedAt: created, UpdatedAt: created,
					Owner: "dead", LeaseUntil: created.Add(time.Minute), Fence: 1,
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

// orphanKey is the key of a record created at t: a UUIDv7 of that instant, as NewOperation
// mints, or a random UUIDv4 with IDEM_BENCH_RECOVER_KEYS=v4.
func orphanKey(t time.Time) string {
	if os.Getenv("IDEM_BENCH_RECOVER_KEYS") == "v4" {
		return uuid.NewString()
	}
	u := uuid.Must(uuid.NewV7())
	ms := uint64(t.UnixMilli())
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	return u.String()
}
