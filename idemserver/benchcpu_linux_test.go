package idemserver_test

import (
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/google/uuid"
)

// threadCPU returns the CPU time the calling thread has used (CLOCK_THREAD_CPUTIME_ID).
func threadCPU(tb testing.TB) time.Duration {
	var ts syscall.Timespec
	const clockThreadCPUTime = 3
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		tb.Fatal(errno)
	}
	return time.Duration(ts.Nano())
}

// BenchmarkMiddlewareInProcessCPU is BenchmarkMiddlewareInProcess timed by the CPU time of
// the benchmark's own thread instead of the wall clock, in alternating blocks of 64 requests
// per variant: on a loaded machine the time the thread waits for a core is not counted, so
// the ratio moves far less from run to run. The collector's background work runs on other
// threads and is not counted either (its assists, made by the benchmark's thread, are): this
// ratio is the middleware's own CPU on the request's path, and BenchmarkMiddlewareMemoryGC
// reports the collector's share.
func BenchmarkMiddlewareInProcessCPU(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	bare, idem := benchHandlers(b)
	const block = 64
	keys := make([]string, block)
	var tb, ti time.Duration
	n := 0
	for b.Loop() {
		for i := range keys {
			keys[i] = uuid.NewString()
		}
		t0 := threadCPU(b)
		for _, k := range keys {
			serveOnce(b, bare, k)
		}
		t1 := threadCPU(b)
		for _, k := range keys {
			serveOnce(b, idem, k)
		}
		t2 := threadCPU(b)
		tb, ti, n = tb+t1-t0, ti+t2-t1, n+block
	}
	b.ReportMetric(float64(tb.Nanoseconds())/float64(n), "bare-cpu-ns/req")
	b.ReportMetric(float64(ti.Nanoseconds())/float64(n), "idemserver-cpu-ns/req")
	b.ReportMetric(float64(ti)/float64(tb), "ratio")
}
