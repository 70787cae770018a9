package boltstore

import (
	"errors"
	"fmt"

	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/idemkit/idem/keystore"
)

// Errors returned by Open and by the Store methods, in addition to the keystore sentinels
// (keystore.ErrNotFound, ErrExists, ErrInvalid, ErrClosed). Each is returned wrapped together
// with the path or record concerned and the underlying cause; test with errors.Is.
var (
	// ErrLocked: Open could not take a lock within Options.Timeout because another process,
	// or another Store in this process, has the file open: the lock file beside it
	// (PATH.lock, held even when that process's file was deleted since; the message names
	// it) or, for OpenReadOnly and a file opened by an older release, the file's own lock
	// (then the cause is bbolt's timeout error).
	ErrLocked = errors.New("boltstore: keystore file is locked by another process or handle")

	// ErrNotKeystore: Open was given a file that is not a bbolt database, or a bbolt database
	// that holds other data and no idem keystore. The file is left untouched.
	ErrNotKeystore = errors.New("boltstore: file is not an idem keystore")

	// ErrCorrupt: the file is an idem keystore but part of it cannot be read: a record that does
	// not decode, fails its checksum or does not match its key, a damaged or inconsistent intent
	// index entry (one index holding an intent the other lacks), damaged bbolt meta pages, a
	// truncated file, a damaged page, a malformed schema version. Open returns it for damage it
	// finds in the file's structure (it reads the meta pages, the freelist and the page tree
	// before bbolt maps the file); reads and writes that touch a damaged part return it, and a
	// write that fails with it writes nothing. Damage never crashes the process: a panic or a
	// memory fault inside bbolt is returned as ErrCorrupt, wrapping the panic value. Once a
	// read or write has found damage to the pages themselves (rather than a record that does
	// not decode), the Store refuses every later write with ErrCorrupt, so as not to spread it;
	// reads go on where they can.
	ErrCorrupt = errors.New("boltstore: keystore is corrupt")

	// ErrSchemaVersion: the keystore was written with another schema version than
	// SchemaVersion: by a newer idem, or by one from before records carried checksums
	// (version 1). Open refuses it, without writing, rather than misread it; the message
	// names both versions.
	ErrSchemaVersion = errors.New("boltstore: keystore schema version is not the one this code reads")
)

// openError maps an error from bbolt.Open on path to this package's errors.
func openError(path string, err error) error {
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return fmt.Errorf("%w: %s: %w (one process opens a keystore file at a time: close the other Store, or share one Client; a fleet shares keystore/pgstore)", ErrLocked, path, err)
	case errors.Is(err, bolterrors.ErrInvalid), errors.Is(err, bolterrors.ErrChecksum),
		errors.Is(err, bolterrors.ErrVersionMismatch), errors.Is(err, bolterrors.ErrInvalidMapping):
		// The file starts like a bbolt file (checked before), so it is damaged.
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, path, err)
	}
	return fmt.Errorf("boltstore: open %s: %w", path, err)
}

// dbError maps an error from a bbolt transaction to this package's errors.
func dbError(err error) error {
	if errors.Is(err, bolterrors.ErrDatabaseNotOpen) {
		return keystore.ErrClosed
	}
	return err
}
