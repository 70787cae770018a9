package boltstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"go.etcd.io/bbolt"
)

// Open opens the keystore file at path. It creates the keystore if the file does not exist
// (with Options.Mode), is empty, or is a bbolt database without any bucket (left by an Open
// that stopped before its first commit). opts may be nil for the defaults.
//
// An existing non-empty file is inspected read-only before anything is written, and Open
// returns, leaving the file byte for byte as it was:
//   - ErrLocked if another process or Store holds the file for longer than Options.Timeout;
//   - ErrNotKeystore if it is not a bbolt file, or a bbolt file with other data;
//   - ErrSchemaVersion if a newer idem wrote it;
//   - ErrCorrupt if it is a damaged keystore.
//
// Other errors (permissions, a directory) are returned wrapped, with path in the message.
func Open(path string, opts *Options) (*Store, error) {
	o := opts.withDefaults()
	deadline := time.Now().Add(o.Timeout)
	if err := inspect(path, o.Timeout); err != nil {
		return nil, err
	}
	bo := *bbolt.DefaultOptions
	bo.Timeout = max(time.Until(deadline), time.Millisecond) // never 0: that waits forever
	db, err := bbolt.Open(path, o.Mode, &bo)
	if err != nil {
		return nil, openError(path, err)
	}
	if err := initLayout(db, path); err != nil {
		_ = db.Close()
		return nil, err
	}
	s := &Store{db: db, secret: o.SecretHeaders}
	s.commit.init(db)
	return s, nil
}

// inspect checks an existing non-empty file without writing to it: it must start like a
// bbolt file, and a read-only bbolt open must find an idem keystore (or no bucket at all)
// with a schema version this code reads. A missing or empty file passes.
func inspect(path string, timeout time.Duration) (err error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("boltstore: open %s: %w", path, err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("boltstore: open %s: not a regular file", path)
	case fi.Size() == 0:
		return nil
	}
	if err := checkMagic(path); err != nil {
		return err
	}
	defer func() { // bbolt panics on some damaged pages
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s: %v", ErrCorrupt, path, p)
		}
	}()
	db, err := bbolt.Open(path, 0, &bbolt.Options{ReadOnly: true, Timeout: timeout})
	if err != nil {
		return openError(path, err)
	}
	defer func() { _ = db.Close() }()
	return db.View(func(tx *bbolt.Tx) error {
		_, err := checkLayout(tx, path)
		return err
	})
}

// bboltMagic is the marker bbolt writes at the start of the meta pages, after the 16-byte
// page header, in the machine's byte order. It is the same in every commit, so a torn meta
// write does not change it.
const (
	bboltMagic     = 0xED0CDAED
	bboltMagicOff  = 16
	bboltMinHeader = bboltMagicOff + 4
)

// checkMagic returns ErrNotKeystore unless the file at path starts like a bbolt file.
func checkMagic(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("boltstore: open %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	var head [bboltMinHeader]byte
	if _, err := io.ReadFull(f, head[:]); err != nil {
		return fmt.Errorf("%w: %s: too short for a bbolt file: %w", ErrNotKeystore, path, err)
	}
	if binary.NativeEndian.Uint32(head[bboltMagicOff:]) != bboltMagic {
		return fmt.Errorf("%w: %s: no bbolt header", ErrNotKeystore, path)
	}
	return nil
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
	case tx.Bucket(bucketRecords) == nil || tx.Bucket(bucketIntents) == nil:
		return false, fmt.Errorf("%w: %s: records or intents bucket missing", ErrCorrupt, path)
	}
	return false, nil
}

var errStop = errors.New("stop")

// initLayout checks the layout of the open database and, if it has no bucket yet, creates
// the keystore buckets and the schema version in one transaction. An existing keystore is not
// written to.
func initLayout(db *bbolt.DB, path string) error {
	var empty bool
	err := db.View(func(tx *bbolt.Tx) (err error) {
		empty, err = checkLayout(tx, path)
		return err
	})
	if err != nil || !empty {
		return err
	}
	return db.Update(func(tx *bbolt.Tx) error {
		if empty, err := checkLayout(tx, path); err != nil || !empty {
			return err
		}
		meta, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		if err := meta.Put(keySchema, []byte(strconv.Itoa(SchemaVersion))); err != nil {
			return err
		}
		if _, err := tx.CreateBucket(bucketRecords); err != nil {
			return err
		}
		_, err = tx.CreateBucket(bucketIntents)
		return err
	})
}
