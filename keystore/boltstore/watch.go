package boltstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"

	"github.com/idemkit/idem/keystore"
)

// fileWatch notices that the open keystore file was deleted or replaced. A process that
// keeps writing to an unlinked file loses every record at exit, and a process that opens
// the path meanwhile starts from an empty file: both would pay every pending intent again.
// The check compares the open file (fstat of its descriptor) with what the path names now
// (stat): the same device and inode, and a link count above zero. It costs two system calls
// and runs after every commit, before the writers are told their write is durable, so that no
// caller sends on the strength of a write to a file that is gone.
type fileWatch struct {
	path   string
	file   *os.File    // the descriptor bbolt holds
	onGone func(error) // Options.OnFileGone
	gone   atomic.Pointer[error]
}

// err returns the error of a file found gone, nil while it is in place.
func (w *fileWatch) err() error {
	if w == nil {
		return nil
	}
	if p := w.gone.Load(); p != nil {
		return *p
	}
	return nil
}

// check looks at the file now. Once it has found the file gone, every later check returns the
// same error; the hook runs once, on its own goroutine.
func (w *fileWatch) check() error {
	if w == nil {
		return nil
	}
	if err := w.err(); err != nil {
		return err
	}
	reason := ""
	open, err := w.file.Stat()
	if err != nil {
		return nil // cannot tell: the commit's own I/O errors speak for the descriptor
	}
	now, err := os.Stat(w.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		reason = "deleted"
	case err != nil:
		return nil // a permission change on the directory: the file may still be there
	case !os.SameFile(open, now):
		reason = "replaced by another file"
	default:
		if n, ok := linkCount(open); ok && n == 0 {
			reason = "deleted"
		}
	}
	if reason == "" {
		return nil
	}
	gone := fmt.Errorf("%w: %s was %s while open; every later call is refused (writes after this one landed in the old file, which no later process opens): restore the file and restart",
		keystore.ErrFileGone, w.path, reason)
	if w.gone.CompareAndSwap(nil, &gone) && w.onGone != nil {
		go w.onGone(gone)
	}
	return w.err()
}
