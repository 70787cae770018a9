//go:build unix

package boltstore_test

import (
	"syscall"
	"time"
)

// cpuTime is the process's user plus system CPU time so far (getrusage), or 0.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
