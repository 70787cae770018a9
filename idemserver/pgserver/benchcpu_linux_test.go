//go:build linux

package pgserver_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// serverCPU reads the CPU time PostgreSQL's processes have used (user and system), from /proc:
// a benchmark on a shared machine compares variants by the CPU they cost, which the machine's
// other load moves far less than their throughput. It sees the server only when it runs on
// this host under Linux; nil otherwise (no metric).
type serverCPU struct {
	postmaster int // the parent of every backend and auxiliary process
}

// newServerCPU finds pool's server's postmaster (the parent of a backend's process), or
// returns nil when /proc does not show it.
func newServerCPU(b *testing.B, pool *pgxpool.Pool) *serverCPU {
	var pid int
	if err := pool.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		b.Fatal(err)
	}
	st, ok := procStat(pid)
	if !ok {
		return nil
	}
	return &serverCPU{postmaster: st.ppid}
}

// used is the CPU time of the postmaster's children alive now. The pool keeps its
// connections, so a backend's time is not lost between two readings; a process that exits
// in between (an autovacuum worker) takes its time with it, which falls on any variant alike.
func (s *serverCPU) used() time.Duration {
	if s == nil {
		return 0
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var total time.Duration
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if st, ok := procStat(pid); ok && (st.ppid == s.postmaster || pid == s.postmaster) {
			total += st.cpu
		}
	}
	return total
}

// procStatFields is a process's parent and CPU time (utime + stime), from /proc/<pid>/stat.
type procStatFields struct {
	ppid int
	cpu  time.Duration
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every Linux platform Go
// supports.
const clockTick = 100

func procStat(pid int) (procStatFields, bool) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStatFields{}, false
	}
	// The command name is in parentheses and may hold spaces: fields count from its end.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return procStatFields{}, false
	}
	f := bytes.Fields(raw[i+1:])
	if len(f) < 13 { // state ppid ... utime(12) stime(13), counted from 1 after the name
		return procStatFields{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	ut, err2 := strconv.ParseInt(string(f[11]), 10, 64)
	st, err3 := strconv.ParseInt(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return procStatFields{}, false
	}
	return procStatFields{ppid: ppid, cpu: time.Duration(ut+st) * time.Second / clockTick}, true
}

// processCPU is this process's CPU time so far (user and system): the middleware's, the
// handlers' and the benchmark's HTTP clients'.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
