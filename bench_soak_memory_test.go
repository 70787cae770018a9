package idem_test

import (
	"fmt"
	"net/http"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-cleanhttp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore"
)

// BenchmarkSoakMemory runs calls through keystore.Memory with a 2 s retention, purged every
// second, from 16 goroutines, and reports the process RSS and the Go runtime's view of its
// memory at each quarter of the run: whether RSS keeps growing while the live heap is flat,
// and if so, which of the runtime's classes grows (heap in use, heap free but not returned
// to the OS, stacks, other). It also samples RSS every 250 ms and reports the largest sample
// of each eighth of the run (e1..e8-rss-max-MiB) and the ratio of the last half's peak to the
// first half's (rss-peak-late/early): samples at four instants land anywhere in the swing a
// purge and the collector make, where a peak per stretch of the run shows a plateau or a
// creep. Run it with a fixed count: -benchtime 1200000x (longer for a plateau: 4800000x).
func BenchmarkSoakMemory(b *testing.B) {
	srv := createdServer()
	defer srv.Close()
	hc := cleanhttp.DefaultPooledClient()
	defer hc.CloseIdleConnections()
	cl, err := idem.NewClient(idem.Config{BaseURL: srv.URL, HTTPClient: hc, Store: keystore.NewMemory(),
		Retention: 2 * time.Second, KeyTTL: 2 * time.Second, PurgeInterval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := b.Context()
	hdr := http.Header{"Content-Type": {"application/json"}}
	var done atomic.Int64
	type sample struct{ rss, heapInUse, heapFree, heapReleased, stacks, other float64 }
	var samples [4]sample
	read := func() sample {
		names := []string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes",
			"/memory/classes/heap/free:bytes", "/memory/classes/heap/released:bytes",
			"/memory/classes/heap/stacks:bytes", "/memory/classes/total:bytes"}
		ms := make([]metrics.Sample, len(names))
		for i, n := range names {
			ms[i].Name = n
		}
		metrics.Read(ms)
		v := func(i int) float64 { return float64(ms[i].Value.Uint64()) / (1 << 20) }
		inUse := v(0) + v(1)
		return sample{rss: rssMiB(), heapInUse: inUse, heapFree: v(2), heapReleased: v(3), stacks: v(4),
			other: v(5) - inUse - v(2) - v(3) - v(4)}
	}
	var taken [4]atomic.Bool
	const eighths = 8
	var peaks [eighths]float64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // RSS peaks per eighth of the calls
		defer close(sampled)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			e := min(int(done.Load()*eighths/int64(max(b.N, 1))), eighths-1)
			peaks[e] = max(peaks[e], rssMiB())
		}
	}()
	timed(b, 16, func() error {
		_, err := cl.Do(ctx, idem.NewOperation(http.MethodPost, benchPath, benchBody, idem.WithHeader(hdr)))
		n := done.Add(1)
		for q := range 4 {
			if n == int64(b.N)*int64(q+1)/4 && taken[q].CompareAndSwap(false, true) {
				samples[q] = read()
			}
		}
		return err
	})
	close(stop)
	<-sampled
	for e, p := range peaks {
		b.ReportMetric(p, fmt.Sprintf("e%d-rss-max-MiB", e+1))
	}
	early, late := max(peaks[0], peaks[1], peaks[2], peaks[3]), max(peaks[4], peaks[5], peaks[6], peaks[7])
	if early > 0 {
		b.ReportMetric(late/early, "rss-peak-late/early")
	}
	for q, s := range samples {
		p := fmt.Sprintf("q%d-", q+1)
		b.ReportMetric(s.rss, p+"rss-MiB")
		b.ReportMetric(s.heapInUse, p+"heap-inuse-MiB")
		b.ReportMetric(s.heapFree, p+"heap-free-MiB")
		b.ReportMetric(s.heapReleased, p+"heap-released-MiB")
		b.ReportMetric(s.stacks, p+"stacks-MiB")
		b.ReportMetric(s.other, p+"runtime-other-MiB")
	}
	if samples[1].rss > 0 {
		b.ReportMetric(samples[3].rss/samples[1].rss, "rss-end/half")
	}
}
