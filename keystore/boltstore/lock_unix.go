//go:build unix

package boltstore

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// lockBeside takes an exclusive flock on path+".lock", created if missing and never removed,
// waiting up to timeout. bbolt's own flock is on the keystore file's inode, so a keystore
// file that is deleted (or renamed away) while a process has it open leaves the path free: a
// second process would create a new, empty keystore there and pay every pending intent
// again. The lock file outlives any keystore file at the path, so the second process is
// refused (ErrLocked) for as long as the first one lives. A lock file rather than a look at
// /proc/locks: that lists locks by device and inode, which the path no longer leads to.
func lockBeside(path string, mode os.FileMode, timeout time.Duration) (*os.File, error) {
	name := path + ".lock"
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, mode)
	if err != nil {
		return nil, fmt.Errorf("boltstore: open %s: lock file: %w", path, err)
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("boltstore: open %s: lock file %s: %w", path, name, err)
		}
		if time.Now().After(deadline) {
			_ = f.Close()
			return nil, fmt.Errorf("%w: %s: %s is held by another process or Store (a live process has this path open, perhaps on a keystore file since deleted or replaced)", ErrLocked, path, name)
		}
		time.Sleep(min(50*time.Millisecond, max(time.Until(deadline), time.Millisecond)))
	}
}

// linkCount returns the number of hard links of the file fi describes.
func linkCount(fi os.FileInfo) (uint64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return uint64(st.Nlink), true
}
