package boltstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/idemkit/idem/keystore"
	"go.etcd.io/bbolt"
)

// Open opens the keystore file at path. If no file exists there, it creates the keystore
// atomically (with Options.Mode): built in a temporary file of the same directory, synced,
// linked into place, and the directory synced, so that a crash never leaves an empty or
// partial keystore. An existing empty file is refused with ErrCorrupt naming it (a keystore
// file is never empty), and left as it is. A bbolt database without any bucket (left by an
// older version's Open that stopped before its first commit) is initialized. opts may be nil
// for the defaults.
//
// An existing non-empty file is inspected read-only before anything is written, and Open
// returns, leaving the file byte for byte as it was:
//   - ErrLocked if another process or Store holds the file, or its lock file PATH.lock (taken
//     first, see lockBeside), for longer than Options.Timeout;
//   - ErrNotKeystore if it is not a bbolt file, or a bbolt file with other data;
//   - ErrSchemaVersion if a newer idem wrote it;
//   - ErrCorrupt if it is a damaged keystore: both meta pages bad, truncated, a damaged
//     freelist or page tree (pages out of place or out of their parent's key range).
//     Damage inside record pages is found later, by the reads and writes that touch it.
//
// bbolt keeps two meta pages and uses the newer valid one: when only the newer one is bad,
// which is what a crash during a commit leaves, the file opens at the commit before it. That
// commit never returned, so nothing was sent on its strength; but damage done to the newer
// meta page later (a failing disk) silently loses the last commit the same way.
//
// When bbolt itself panics on a damaged page tree while opening (damage the inspection does
// not look for), Open returns ErrCorrupt, but bbolt has mapped the file by
// then and cannot be told to unmap it: the file stays locked to this process, and a later
// Open in the same process returns ErrLocked until it exits.
//
// A symbolic link is followed once, here: the lock file and the file watch are those of the
// file it names, so that two processes opening the file by two names exclude each other. A
// link that names no file is refused (creating through it would not be atomic).
//
// An empty path is keystore.ErrInvalid. Other errors (permissions, a directory) are returned
// wrapped, with path in the message.
func Open(path string, opts *Options) (*Store, error) {
	o := opts.withDefaults()
	path, err := realPath(path)
	if err != nil {
		return nil, err
	}
	if err := o.KeyRing.Check(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(o.Timeout)
	lock, err := lockBeside(path, o.Mode, o.Timeout)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok && lock != nil {
			_ = lock.Close()
		}
	}()
	if err := createAtomic(path, o.Mode, o.Timeout); err != nil {
		return nil, err
	}
	if err := inspect(path, o.Timeout); err != nil {
		return nil, err
	}
	bo := *bbolt.DefaultOptions
	bo.Timeout = max(time.Until(deadline), time.Millisecond) // never 0: that waits forever
	// See Options.SyncFreelist.
	bo.NoFreelistSync, bo.FreelistType = !o.SyncFreelist, bbolt.FreelistMapType
	db, file, err := openDBFile(path, o.Mode, &bo)
	if err != nil {
		return nil, err
	}
	if err := guard(path, func() error { return initLayout(db, path) }); err != nil {
		_ = db.Close()
		return nil, err
	}
	s := &Store{db: db, secret: o.SecretHeaders, lock: lock, codec: codec{ring: o.KeyRing}}
	s.commit.init(db)
	s.commit.flushDelay, s.commit.done = o.FlushDelay, s.pending.settle
	s.commit.watch = &fileWatch{path: path, file: file, onGone: o.OnFileGone}
	// The file may have gone between the lock and bbolt's open of the path.
	if err := s.commit.watch.check(); err != nil {
		_ = db.Close()
		return nil, err
	}
	ok = true
	return s, nil
}

// inspect checks an existing non-empty file without writing to it: checkFile must find an
// intact bbolt file (with plain reads, before bbolt reads anything but the meta pages through
// its memory map), and a read-only bbolt open must find an idem keystore (or no bucket at all)
// with a schema version this code reads. A missing or empty file passes.
func inspect(path string, timeout time.Duration) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("boltstore: open %s: %w", path, err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("boltstore: open %s: not a regular file", path)
	case fi.Size() == 0:
		// Open creates a keystore atomically, so an empty file is not one it left: it may
		// be a keystore whose contents were lost. Refuse it rather than start afresh.
		return fmt.Errorf("%w: %s is empty; a keystore file never is (move it away to start a new keystore)", ErrCorrupt, path)
	}
	if err := checkFile(path, false); err != nil {
		return err
	}
	db, err := openDB(path, 0, &bbolt.Options{ReadOnly: true, Timeout: timeout})
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()
	// The shared lock is held: no writer changes the file while checkFile reads all of it.
	if err := checkFile(path, true); err != nil {
		return err
	}
	return guard(path, func() error {
		return db.View(func(tx *bbolt.Tx) error {
			_, err := checkLayout(tx, path)
			return err
		})
	})
}

// openDB runs bbolt.Open under guard and maps its errors. bbolt.Open does not clean up after
// a panic, so openDB keeps the file it opens and closes it then, which releases the lock.
func openDB(path string, mode os.FileMode, bo *bbolt.Options) (*bbolt.DB, error) {
	db, _, err := openDBFile(path, mode, bo)
	return db, err
}

// openDBFile is openDB that also returns the file bbolt opened (which it closes with the
// database).
func openDBFile(path string, mode os.FileMode, bo *bbolt.Options) (*bbolt.DB, *os.File, error) {
	var file *os.File
	o := *bo
	o.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag, perm)
		file = f
		return f, err
	}
	var db *bbolt.DB
	err := guard(path, func() (err error) {
		db, err = bbolt.Open(path, mode, &o)
		return err
	})
	switch {
	case errors.Is(err, ErrCorrupt): // a panic
		if file != nil {
			_ = file.Close()
		}
		return nil, nil, err
	case err != nil:
		return nil, nil, openError(path, err)
	}
	return db, file, nil
}

// checkLayout reports whether the database is empty (no bucket at all: new, or created by a
// process that stopped before initLayout committed), or returns an error unless it is a
// keystore this code can read.
func checkLayout(tx *bbolt.Tx, path string) (empty bool, err error) {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		var other []byte
		_ = tx.ForEach(func(name []byte, _ *bbolt.Bucket) error {
			other = name
			return errStop
		})
		if other != nil {
			return false, fmt.Errorf("%w: %s: bbolt database with bucket %q and no keystore meta", ErrNotKeystore, path, other)
		}
		// bbolt creates a file with transaction ids 0 and 1 in its meta pages; initLayout's
		// commit is the next. No bucket after more commits is a damaged root page, not a new
		// file: initializing it would lose whatever the file held.
		committed := uint64(tx.ID())
		if tx.Writable() {
			committed-- // the id of the transaction in progress
		}
		if committed > 1 {
			return false, fmt.Errorf("%w: %s: no bucket, after %d transactions", ErrCorrupt, path, committed)
		}
		return true, nil
	}
	raw := meta.Get(keySchema)
	v, err := strconv.Atoi(string(raw))
	switch {
	case err != nil || v < 1:
		return false, fmt.Errorf("%w: %s: schema version %q", ErrCorrupt, path, raw)
	case v > SchemaVersion:
		return false, fmt.Errorf("%w: %s has schema version %d, this code reads version %d at most",
			ErrSchemaVersion, path, v, SchemaVersion)
	case v < 2:
		// Version 1 values carry no checksum: read as version 2 every record would be damage.
		// Version 2 differs from 3 only in that its records are all JSON, which this code
		// reads: initLayout raises it to SchemaVersion in place, a read-only open reads it
		// as it is.
		return false, fmt.Errorf("%w: %s has schema version %d, written before records carried checksums; this code reads versions 2 and %d only (settle its pending records with the idem that wrote it, then start a new file)",
			ErrSchemaVersion, path, v, SchemaVersion)
	case tx.Bucket(bucketRecords) == nil || tx.Bucket(bucketIntents) == nil || tx.Bucket(bucketIntentHash) == nil:
		return false, fmt.Errorf("%w: %s: records or intent index bucket missing", ErrCorrupt, path)
	case tx.Bucket(bucketUnleased) == nil || tx.Bucket(bucketLeased) == nil:
		return false, fmt.Errorf("%w: %s: pending index bucket missing", ErrCorrupt, path)
	}
	return false, nil
}

// schemaOf returns the schema version of a keystore that checkLayout accepted.
func schemaOf(tx *bbolt.Tx) int {
	v, _ := strconv.Atoi(string(tx.Bucket(bucketMeta).Get(keySchema)))
	return v
}

var errStop = errors.New("stop")

// initLayout checks the layout of the open database and, if it has no bucket yet, creates
// the keystore buckets and the schema version in one transaction. A keystore of version 2
// is raised to the current version (its meta key only: its JSON records are read as they
// are); one of the current version is not written to (checkLayout refuses any other).
func initLayout(db *bbolt.DB, path string) error {
	var empty bool
	version := SchemaVersion
	err := db.View(func(tx *bbolt.Tx) (err error) {
		if empty, err = checkLayout(tx, path); err == nil && !empty {
			version = schemaOf(tx)
		}
		return err
	})
	if err != nil || (!empty && version == SchemaVersion) {
		return err
	}
	return update(db, path, func(tx *bbolt.Tx) error {
		empty, err := checkLayout(tx, path)
		if err != nil {
			return err
		}
		if !empty {
			// Version 2: from now on binary records are written, which earlier releases
			// cannot read; they refuse the file with ErrSchemaVersion rather than report
			// each such record as damage.
			if schemaOf(tx) < SchemaVersion {
				return tx.Bucket(bucketMeta).Put(keySchema, []byte(strconv.Itoa(SchemaVersion)))
			}
			return nil
		}
		meta, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		if err := meta.Put(keySchema, []byte(strconv.Itoa(SchemaVersion))); err != nil {
			return err
		}
		for _, b := range [][]byte{bucketRecords, bucketIntents, bucketIntentHash} {
			if _, err := tx.CreateBucket(b); err != nil {
				return err
			}
		}
		return buildIndex(tx)
	})
}

// realPath returns path with a symbolic link in its last element resolved; a link whose
// target does not exist is an error. A path that does not exist yet is returned as it is.
func realPath(path string) (string, error) {
	if path == "" { // else the lock file would be ".lock" in the working directory
		return "", errors.Join(keystore.ErrInvalid, errors.New("boltstore: empty path; give the keystore file's path"))
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		return path, nil
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", fmt.Errorf("boltstore: %s is a symbolic link to no keystore file (%w); point it at the file, or give the file's own path", path, err)
	}
	return real, nil
}
