package boltstore_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// Tests of Open: locking, and files that are not (or no longer) keystores this code reads.

func TestLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	first := open(t, path, nil)
	const timeout = 100 * time.Millisecond
	start := time.Now()
	_, err := boltstore.Open(path, &boltstore.Options{Timeout: timeout})
	elapsed := time.Since(start)
	t.Log(elapsed, err)
	if !errors.Is(err, boltstore.ErrLocked) { // the lock file beside it is taken first
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if elapsed > 5*timeout {
		t.Fatalf("second Open took %v with Timeout %v", elapsed, timeout)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	open(t, path, &boltstore.Options{Timeout: timeout}).Close()
}

func TestNotKeystore(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 64<<10)
	for i := range random {
		random[i] = byte(rnd.Uint32())
	}
	otherDB := func(t *testing.T, path string) {
		db, err := bbolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		err = db.Update(func(tx *bbolt.Tx) error {
			b, err := tx.CreateBucket([]byte("app"))
			if err != nil {
				return err
			}
			return b.Put([]byte("k"), []byte("v"))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	cases := map[string]func(t *testing.T, path string){
		"random":               func(t *testing.T, path string) { write(t, path, random) },
		"short text":           func(t *testing.T, path string) { write(t, path, []byte("hello\n")) },
		"long text":            func(t *testing.T, path string) { write(t, path, []byte(strings.Repeat("a line of text\n", 2000))) },
		"other bbolt database": otherDB,
	}
	for name, create := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "file")
			create(t, path)
			before := readFile(t, path)
			_, err := boltstore.Open(path, nil)
			t.Log(err)
			if !errors.Is(err, boltstore.ErrNotKeystore) {
				t.Fatalf("Open: %v, want ErrNotKeystore", err)
			}
			if !bytes.Equal(before, readFile(t, path)) {
				t.Fatal("Open changed the file")
			}
		})
	}
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// An empty or truncated file is never a new keystore: Open refuses it, names it, and leaves
// it as it was.
func TestEmptyOrTruncatedFileRefused(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full.db")
	s := open(t, full, nil)
	if err := s.Create(bg, record("t", "k")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	good := readFile(t, full)
	// bbolt may grow the file past its last page, and that tail is not data: cut below the
	// high-water mark of the newer meta page (page size at byte 24, pgid at byte 56).
	ps := int(binary.LittleEndian.Uint32(good[24:]))
	need := int(max(binary.LittleEndian.Uint64(good[56:]), binary.LittleEndian.Uint64(good[ps+56:]))) * ps
	for _, size := range []int{0, 1, 100, ps, need / 2, need - 1} {
		path := filepath.Join(dir, fmt.Sprintf("cut-%d.db", size))
		write(t, path, good[:size])
		_, err := boltstore.Open(path, nil)
		if !errors.Is(err, boltstore.ErrCorrupt) && !errors.Is(err, boltstore.ErrNotKeystore) {
			t.Fatalf("size %d: Open: %v, want ErrCorrupt or ErrNotKeystore", size, err)
		}
		if size == 0 && !errors.Is(err, boltstore.ErrCorrupt) {
			t.Fatalf("empty file: %v, want ErrCorrupt", err)
		}
		if !strings.Contains(err.Error(), path) {
			t.Fatalf("size %d: error %q does not name the file", size, err)
		}
		if got := readFile(t, path); !bytes.Equal(got, good[:size]) {
			t.Fatalf("size %d: the file changed", size)
		}
	}
}

// A new keystore is created complete under its name, with no temporary file left behind,
// and reopens with its records.
func TestCreateIsAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.db")
	s := open(t, path, &boltstore.Options{Mode: 0o640})
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || entries[0].Name() != "keys.db" || entries[1].Name() != "keys.db.lock" {
		t.Fatalf("directory holds %v, want keys.db and its lock file alone", entries)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() == 0 || fi.Mode().Perm()&^0o640 != 0 {
		t.Fatalf("new file: %d bytes, mode %v", fi.Size(), fi.Mode())
	}
	if err := s.Create(bg, record("t", "k")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, path, nil)
	if _, err := s.Get(bg, "t", "k"); err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// rawUpdate changes a closed keystore file with bbolt directly.
func rawUpdate(t *testing.T, path string, fn func(tx *bbolt.Tx) error) {
	t.Helper()
	db, err := bbolt.Open(path, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// A file of another schema version is refused, unchanged, naming both versions: a newer one,
// and version 1, whose values carry no checksum and would all read as damage.
func TestSchemaVersion(t *testing.T) {
	for _, v := range []string{"4", "1"} {
		t.Run(v, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "keys.db")
			open(t, path, nil).Close()
			rawUpdate(t, path, func(tx *bbolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("schema"), []byte(v)) })
			before := readFile(t, path)
			_, err := boltstore.Open(path, nil)
			if !errors.Is(err, boltstore.ErrSchemaVersion) {
				t.Fatalf("Open: %v, want ErrSchemaVersion", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "version "+v) || !strings.Contains(msg, "version 3") && !strings.Contains(msg, "versions 2 and 3") {
				t.Fatalf("message %q does not name both versions", msg)
			}
			if !bytes.Equal(before, readFile(t, path)) {
				t.Fatal("Open changed the file")
			}
		})
	}
}

func TestCorrupt(t *testing.T) {
	t.Run("record", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "keys.db")
		s := open(t, path, nil)
		good, bad := record("t", "good"), record("t", "bad")
		for _, r := range []*keystore.Record{good, bad} {
			if err := s.Create(bg, r); err != nil {
				t.Fatal(err)
			}
		}
		s.Close()
		rawUpdate(t, path, func(tx *bbolt.Tx) error {
			return tx.Bucket([]byte("records")).Put(append([]byte{1, 't'}, "bad"...), []byte("{not json"))
		})
		s = open(t, path, nil)
		defer s.Close()
		if _, err := s.Get(bg, "t", "good"); err != nil {
			t.Fatalf("Get of an intact record: %v", err)
		}
		_, err := s.Get(bg, "t", "bad")
		wantIs(t, "Get", err, boltstore.ErrCorrupt)
		_, err = s.GetByIntent(bg, "t", "intent-bad")
		wantIs(t, "GetByIntent", err, boltstore.ErrCorrupt)
		_, err = s.List(bg)
		wantIs(t, "List", err, boltstore.ErrCorrupt)
		wantIs(t, "Update", s.Update(bg, bad), boltstore.ErrCorrupt)
		_, err = s.Purge(bg, time.Now())
		wantIs(t, "Purge", err, boltstore.ErrCorrupt)
		if err := s.Create(bg, record("t", "new")); err != nil {
			t.Fatalf("Create beside a corrupt record: %v", err)
		}
	})
	t.Run("schema", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "keys.db")
		open(t, path, nil).Close()
		rawUpdate(t, path, func(tx *bbolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("schema"), []byte("x")) })
		_, err := boltstore.Open(path, nil)
		wantIs(t, "Open", err, boltstore.ErrCorrupt)
	})
	t.Run("meta pages", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "keys.db")
		open(t, path, nil).Close()
		b := readFile(t, path)
		pageSize := os.Getpagesize()
		for _, off := range []int{16 + 8, pageSize + 16 + 8} { // page size field of both metas
			b[off] ^= 0xff
		}
		write(t, path, b)
		_, err := boltstore.Open(path, nil)
		wantIs(t, "Open", err, boltstore.ErrCorrupt)
		if !bytes.Equal(b, readFile(t, path)) {
			t.Fatal("Open changed the file")
		}
	})
}

func wantIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: %v, want %v", what, err, target)
	}
}

// An empty path is refused before anything is created: no ".lock" appears in the working
// directory.
func TestOpenEmptyPath(t *testing.T) {
	t.Chdir(t.TempDir())
	if _, err := boltstore.Open("", nil); !errors.Is(err, keystore.ErrInvalid) {
		t.Fatalf("Open(\"\"): %v, want keystore.ErrInvalid", err)
	}
	if entries, err := os.ReadDir("."); err != nil || len(entries) != 0 {
		t.Fatalf("working directory after Open(\"\"): %v, %v; want empty", entries, err)
	}
}
