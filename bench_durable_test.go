package idem_test

import (
	"fmt"
	"io"
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

	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/go-retryablehttp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// createdServer answers every request 201 with createdBody.
func createdServer() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(createdBody)
	}))
}

// timed runs op b.N times from c goroutines and reports calls/s and, per call, the median
// and 99th percentile latency in µs.
func timed(b *testing.B, c int, op func() error) {
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	user0, sys0 := cpuTime()
	start := time.Now()
	for range c {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N {
					return
				}
				t0 := time.Now()
				if err := op(); err != nil {
					b.Error(err)
					return
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if user, sys := cpuTime(); user > 0 {
		user, sys = user-user0, sys-sys0
		b.ReportMetric((user+sys).Seconds()/elapsed.Seconds(), "cpu-cores")
		b.ReportMetric(float64((user+sys).Nanoseconds())/1e3/float64(b.N), "cpu-µs/call")
		b.ReportMetric(float64(sys.Nanoseconds())/1e3/float64(b.N), "sys-µs/call")
	}
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// BenchmarkDurable measures durable calls (idem with a bbolt keystore in TMPDIR) on loopback
// against their floor and against go-retryablehttp without persistence, all in one run:
//
//   - floor/c=1: one loopback POST (net/http) plus one 4 KiB write and fdatasync of a file,
//     the least a call that persists before sending can cost;
//   - retryablehttp/c=N: go-retryablehttp (Logger nil), nothing persisted;
//   - idem-bolt/c=N: Client.Do with boltstore, a fresh UUIDv7 key per call (minted by NewOperation);
//   - idem-shardF/c=64: the same with the records spread by key over F bbolt files, each with
//     its own commit pipeline (routedStore, a measuring device, not a keystore): what a
//     sharded store could gain when one file's commits bound the 64 callers.
//
// Every variant also reports the process's CPU time (user and system) in the timed loop:
// cpu-cores, over its wall time (near the number of cores means the run is bound by the CPU,
// not by the disk), and per call, cpu-µs/call and its system part sys-µs/call (the kernel's
// work: the loopback exchange, and for idem the keystore's page writes and fdatasyncs).
//
// Targets: idem-bolt/c=1 p50 <= 3x floor p50; idem-bolt/c=64 calls/s >= 0.4x
// retryablehttp/c=64.
func BenchmarkDurable(b *testing.B) {
	srv := createdServer()
	defer srv.Close()
	hc := cleanhttp.DefaultPooledClient()
	hc.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	defer hc.CloseIdleConnections()
	url := srv.URL + benchPath
	post := func() error {
		resp, err := hc.Post(url, "application/json", strings.NewReader(string(benchBody)))
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	b.Run("floor/c=1", func(b *testing.B) {
		f, err := os.Create(filepath.Join(b.TempDir(), "floor"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		page := make([]byte, 4096)
		timed(b, 1, func() error {
			if _, err := f.WriteAt(page, 0); err != nil {
				return err
			}
			if err := fdatasync(f); err != nil {
				return err
			}
			return post()
		})
	})
	for _, c := range []int{1, 64} {
		b.Run(fmt.Sprintf("retryablehttp/c=%d", c), func(b *testing.B) {
			rc := retryablehttp.NewClient()
			rc.HTTPClient, rc.Logger = hc, nil
			timed(b, c, func() error {
				req, err := retryablehttp.NewRequest(http.MethodPost, url, benchBody)
				if err != nil {
					return err
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", benchKey)
				resp, err := rc.Do(req)
				if err != nil {
					return err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				return resp.Body.Close()
			})
		})
		for _, files := range []int{2, 4} {
			if c == 1 {
				break // a lone call waits for one commit whatever the number of files
			}
			b.Run(fmt.Sprintf("idem-shard%d/c=%d", files, c), func(b *testing.B) {
				rs := &routedStore{}
				for i := range files {
					s, err := boltstore.Open(filepath.Join(b.TempDir(), fmt.Sprintf("keys%d.db", i)), nil)
					if err != nil {
						b.Fatal(err)
					}
					rs.shards = append(rs.shards, s)
				}
				defer rs.Close()
				durableCalls(b, c, srv.URL, hc, rs)
			})
		}
		b.Run(fmt.Sprintf("idem-bolt/c=%d", c), func(b *testing.B) {
			store, err := boltstore.Open(filepath.Join(b.TempDir(), "keys.db"), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			durableCalls(b, c, srv.URL, hc, store)
		})
	}
}

// durableCalls times b.N calls of the benchmark's payment by c callers through one client on
// store.
func durableCalls(b *testing.B, c int, base string, hc *http.Client, store keystore.Store) {
	cl, err := idem.NewClient(idem.Config{BaseURL: base, HTTPClient: hc, Store: store})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := b.Context()
	hdr := http.Header{"Content-Type": {"application/json"}}
	timed(b, c, func() error {
		_, err := cl.Do(ctx, idem.NewOperation(http.MethodPost, benchPath, benchBody, idem.WithHeader(hdr)))
		return err
	})
}

// BenchmarkSoak runs calls through a bbolt keystore with a short retention (2 s, purged
// every second while the client runs) from 16 goroutines, and reports the keystore file size
// and the process RSS at half and at the end of the run, and their ratio (end/half): flat
// means about 1. Run it with a fixed count: -benchtime 200000x.
func BenchmarkSoak(b *testing.B) {
	srv := createdServer()
	defer srv.Close()
	hc := cleanhttp.DefaultPooledClient()
	defer hc.CloseIdleConnections()
	path := filepath.Join(b.TempDir(), "keys.db")
	store, err := boltstore.Open(path, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	cl, err := idem.NewClient(idem.Config{BaseURL: srv.URL, HTTPClient: hc, Store: store,
		// KeyTTL at most Retention (NewClient refuses less): the server of this benchmark
		// keeps no keys, so the short TTL changes nothing but what may be purged.
		Retention: 2 * time.Second, KeyTTL: 2 * time.Second, PurgeInterval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := b.Context()
	hdr := http.Header{"Content-Type": {"application/json"}}
	var done atomic.Int64
	var once sync.Once
	var halfSize, halfRSS float64
	timed(b, 16, func() error {
		_, err := cl.Do(ctx, idem.NewOperation(http.MethodPost, benchPath, benchBody, idem.WithHeader(hdr)))
		if done.Add(1) == int64(b.N/2) {
			once.Do(func() { halfSize, halfRSS = fileMiB(path), rssMiB() })
		}
		return err
	})
	endSize, endRSS := fileMiB(path), rssMiB()
	b.ReportMetric(halfSize, "file-MiB-half")
	b.ReportMetric(endSize, "file-MiB-end")
	b.ReportMetric(halfRSS, "rss-MiB-half")
	b.ReportMetric(endRSS, "rss-MiB-end")
	if halfSize > 0 && halfRSS > 0 {
		b.ReportMetric(endSize/halfSize, "file-end/half")
		b.ReportMetric(endRSS/halfRSS, "rss-end/half")
	}
}

func fileMiB(path string) float64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return float64(fi.Size()) / (1 << 20)
}

// rssMiB is the resident set size from /proc/self/statm (Linux), or 0.
func rssMiB() float64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseFloat(f[1], 64)
	return pages * float64(os.Getpagesize()) / (1 << 20)
}

// cpuTime is the process's user and system CPU time so far (getrusage), or zeros.
func cpuTime() (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}
