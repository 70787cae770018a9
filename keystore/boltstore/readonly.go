package boltstore

import (
	"fmt"
	"os"

	"go.etcd.io/bbolt"
)

// OpenReadOnly opens an existing keystore file for reading only, as an operator's tool does:
// it never creates, initializes or writes the file, and takes a shared lock, so several
// readers may hold the file at once but not while a Store opened with Open (a running
// service) holds it. opts may be nil; only Timeout, SecretHeaders and KeyRing apply.
//
// It returns ErrLocked if a writer holds the file for longer than Options.Timeout (it never
// waits forever), ErrNotKeystore if the file is not an idem keystore (an empty file or a
// bbolt file without the keystore buckets included), ErrSchemaVersion and ErrCorrupt as Open
// does, and a wrapped fs.ErrNotExist if the file does not exist.
//
// Reads work as on any Store. Create, Update and Purge fail with an error matching
// bbolt's errors.ErrDatabaseReadOnly, and nothing is written.
func OpenReadOnly(path string, opts *Options) (*Store, error) {
	o := opts.withDefaults()
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return nil, fmt.Errorf("boltstore: open %s: %w", path, err)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("boltstore: open %s: not a regular file", path)
	case fi.Size() == 0:
		return nil, fmt.Errorf("%w: %s is empty", ErrNotKeystore, path)
	}
	if err := checkFile(path, false); err != nil {
		return nil, err
	}
	db, err := openDB(path, 0, &bbolt.Options{ReadOnly: true, Timeout: o.Timeout})
	if err != nil {
		return nil, err
	}
	// The shared lock is held from here: no writer changes the file while it is checked.
	err = checkFile(path, true)
	if err == nil {
		err = guard(path, func() error {
			return db.View(func(tx *bbolt.Tx) error {
				empty, err := checkLayout(tx, path)
				if err == nil && empty {
					err = fmt.Errorf("%w: %s has no keystore buckets", ErrNotKeystore, path)
				}
				return err
			})
		})
	}
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	if err := o.KeyRing.Check(); err != nil {
		_ = db.Close()
		return nil, err
	}
	s := &Store{db: db, secret: o.SecretHeaders, codec: codec{ring: o.KeyRing}}
	s.commit.init(db)
	return s, nil
}
