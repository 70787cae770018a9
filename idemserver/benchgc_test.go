package idemserver_test

import (
	"runtime"
	"runtime/metrics"
	"testing"

	"github.com/google/uuid"
)

// BenchmarkMiddlewareMemoryGC runs the middleware on the memory backend alone (no bare
// variant) and reports what keeping every answer costs the collector: gc-cpu-% is the
// collector's share of the process's CPU time during the loop (runtime/metrics), kept-B/key
// the heap still in use per key after the loop and a collection.
func BenchmarkMiddlewareMemoryGC(b *testing.B) {
	_, idem := benchHandlers(b)
	keys := make([]string, 0, b.N)
	for range b.N {
		keys = append(keys, uuid.NewString())
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	samples := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/cpu/classes/total:cpu-seconds"}}
	metrics.Read(samples)
	gc0, all0 := samples[0].Value.Float64(), samples[1].Value.Float64()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		serveOnce(b, idem, keys[i])
	}
	b.StopTimer()
	metrics.Read(samples)
	gc1, all1 := samples[0].Value.Float64(), samples[1].Value.Float64()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	b.ReportMetric(100*(gc1-gc0)/(all1-all0), "gc-cpu-%")
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(b.N), "kept-B/key")
	runtime.KeepAlive(idem)
}
