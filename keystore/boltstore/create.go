package boltstore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.etcd.io/bbolt"
)

// createAtomic makes a new keystore at path if no file is there: it builds the keystore in a
// temporary file of the same directory, syncs it, links it into place (never over a file
// that appeared meanwhile) and syncs the directory. A crash at any step leaves either no file
// at path or a complete keystore, never an empty or half-written one, so Open can refuse
// those as damage. A file that appears at path meanwhile is left to Open's checks.
func createAtomic(path string, mode os.FileMode, timeout time.Duration) error {
	if _, err := os.Lstat(path); err == nil || !errors.Is(err, os.ErrNotExist) {
		return nil // there is a file (or an error Open reports when it opens it)
	}
	dir := filepath.Dir(path)
	// O_EXCL with mode, so that the umask applies as for any new file.
	name := filepath.Join(dir, "."+filepath.Base(path)+".new-"+strconv.FormatUint(rand.Uint64(), 36))
	tmp, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("boltstore: create %s: %w", path, err)
	}
	defer os.Remove(name) // after the link, only the temporary name goes
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("boltstore: create %s: %w", path, err)
	}
	db, err := openDB(name, mode, &bbolt.Options{Timeout: timeout})
	if err != nil {
		return err
	}
	err = guard(path, func() error { return initLayout(db, path) }) // bbolt fsyncs the commit
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncPath(name)
	}
	if err == nil {
		err = os.Link(name, path)
		if errors.Is(err, os.ErrExist) {
			return nil // created meanwhile by someone else: Open checks that file
		}
	}
	if err == nil {
		err = syncPath(dir)
	}
	if err != nil {
		return fmt.Errorf("boltstore: create %s: %w", path, err)
	}
	return nil
}

// syncPath fsyncs a file or directory.
func syncPath(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
