package idem_test

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-cleanhttp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore/boltstore"
)

// BenchmarkPurgeLatency measures what the background retention purge costs the calls beside
// it: durable calls (bbolt in TMPDIR) paced at 2,500 a second, up to 64 in flight, with a 2 s
// retention, purged every second (purge=on) or never (purge=off, the baseline). It reports
// the calls' p50, p99 and p99.9 latency in µs, the store's file size at the end, the rate
// reached and how far behind its schedule the last call started (behind-ms: more than a few
// milliseconds means the machine did not keep the pace, and the latencies measure a queue).
// IDEM_BENCH_PURGE_RATE sets another pace (calls a second) for a machine that cannot keep
// 2,500. Run it with a fixed count, the same for both: -benchtime 30000x (12 s each).
func BenchmarkPurgeLatency(b *testing.B) {
	srv := createdServer()
	defer srv.Close()
	hc := cleanhttp.DefaultPooledClient()
	hc.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	defer hc.CloseIdleConnections()
	rate := 2500 // calls/s
	if v := os.Getenv("IDEM_BENCH_PURGE_RATE"); v != "" {
		var err error
		if rate, err = strconv.Atoi(v); err != nil || rate <= 0 {
			b.Fatalf("IDEM_BENCH_PURGE_RATE=%q: want a positive number of calls a second", v)
		}
	}
	interval := time.Second / time.Duration(rate)
	for _, purge := range []bool{false, true} {
		name := "purge=off"
		every := time.Duration(-1) // never
		if purge {
			name, every = "purge=on", time.Second
		}
		b.Run(name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "keys.db")
			store, err := boltstore.Open(path, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			cl, err := idem.NewClient(idem.Config{BaseURL: srv.URL, HTTPClient: hc, Store: store,
				Retention: 2 * time.Second, KeyTTL: 2 * time.Second, PurgeInterval: every})
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			ctx := b.Context()
			hdr := http.Header{"Content-Type": {"application/json"}}
			lat := make([]time.Duration, b.N)
			sem := make(chan struct{}, 64)
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			var behind time.Duration
			for i := range b.N {
				due := start.Add(time.Duration(i) * interval)
				if d := time.Until(due); d > 0 {
					time.Sleep(d)
				}
				sem <- struct{}{}
				behind = time.Since(due)
				wg.Go(func() {
					defer func() { <-sem }()
					t0 := time.Now()
					if _, err := cl.Do(ctx, idem.NewOperation(http.MethodPost, benchPath, benchBody, idem.WithHeader(hdr))); err != nil {
						b.Error(err)
					}
					lat[i] = time.Since(t0)
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			slices.Sort(lat)
			at := func(q float64) float64 { return float64(lat[int(float64(len(lat)-1)*q)].Microseconds()) }
			b.ReportMetric(at(0.5), "p50-µs")
			b.ReportMetric(at(0.99), "p99-µs")
			b.ReportMetric(at(0.999), "p99.9-µs")
			b.ReportMetric(fileMiB(path), "file-MiB")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
			b.ReportMetric(float64(behind.Microseconds())/1e3, "behind-ms")
		})
	}
}
