//go:build !unix

package boltstore

import (
	"os"
	"time"
)

// lockBeside takes no lock where flock is missing: there bbolt's lock on the file is all.
func lockBeside(path string, mode os.FileMode, timeout time.Duration) (*os.File, error) {
	return nil, nil
}

// linkCount is unknown where there is no Stat_t.
func linkCount(os.FileInfo) (uint64, bool) { return 0, false }
