package boltstore_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// A keystore file deleted or replaced while open: the next commit finds it, the write is
// refused with keystore.ErrFileGone (its caller sends nothing), the hook is told once, and
// every later call, reads included, is refused too. The old code went on writing to the
// unlinked file.
func TestFileGoneStopsTheStore(t *testing.T) {
	for _, how := range []string{"deleted", "replaced"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "keys.db")
			gone := make(chan error, 2)
			s := open(t, path, &boltstore.Options{OnFileGone: func(err error) { gone <- err }})
			defer s.Close()
			if err := s.Create(bg, record("t", "k-1")); err != nil {
				t.Fatal(err)
			}
			switch how {
			case "deleted":
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
			case "replaced": // a copy put in its place: another inode
				if err := os.WriteFile(path+".new", readFile(t, path), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(path+".new", path); err != nil {
					t.Fatal(err)
				}
			}
			err := s.Create(bg, record("t", "k-2"))
			wantIs(t, "Create after the file went", err, keystore.ErrFileGone)
			select {
			case herr := <-gone:
				wantIs(t, "hook", herr, keystore.ErrFileGone)
			case <-time.After(5 * time.Second):
				t.Fatal("OnFileGone not called")
			}
			_, err = s.Get(bg, "t", "k-1")
			wantIs(t, "Get after", err, keystore.ErrFileGone)
			_, err = s.GetByIntent(bg, "t", "intent-k-1")
			wantIs(t, "GetByIntent after", err, keystore.ErrFileGone)
			wantIs(t, "UpdateDeferred after", s.UpdateDeferred(bg, record("t", "k-1")), keystore.ErrFileGone)
			wantIs(t, "Update after", s.Update(bg, record("t", "k-1")), keystore.ErrFileGone)
			select {
			case <-gone:
				t.Fatal("OnFileGone called twice")
			case <-time.After(20 * time.Millisecond):
			}
		})
	}
}

// A second Open of a path whose file was deleted while the first Store holds it is refused
// (the lock file beside it), and creates nothing; the old code gave it a fresh, empty file,
// and every pending intent was paid again.
func TestSecondOpenerOfADeletedPathIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	first := open(t, path, nil)
	if err := first.Create(bg, record("t", "k-1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	_, err := boltstore.Open(path, &boltstore.Options{Timeout: 100 * time.Millisecond})
	wantIs(t, "second Open", err, boltstore.ErrLocked)
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the refused Open left a file: %v", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	open(t, path, nil).Close() // the first process gone, the path is free
}

// Deleting the file while a client runs: the payments before are sent once each, and not one
// request is sent after, new intents and old alike.
func TestClientSendsNothingAfterTheFileIsDeleted(t *testing.T) {
	var sent atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"pay_1"}`)
	}))
	defer api.Close()
	path := filepath.Join(t.TempDir(), "keys.db")
	s := open(t, path, nil)
	defer s.Close()
	c, err := idem.NewClient(idem.Config{BaseURL: api.URL, Store: s})
	if err != nil {
		t.Fatal(err)
	}
	pay := func(intent string) error {
		op := idem.NewOperation(http.MethodPost, "/v1/payments", []byte(`{"amount":100}`), idem.WithIntent(intent))
		_, err := c.Do(context.Background(), op)
		return err
	}
	for i := range 5 {
		if err := pay(fmt.Sprint("ord-", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	for i := range 10 { // new intents, then the ones already paid
		err := pay(fmt.Sprint("ord-", 5+i%5-5*(i/5)))
		wantIs(t, fmt.Sprint("payment ", i, " after the deletion"), err, keystore.ErrFileGone)
	}
	if n := sent.Load(); n != 5 {
		t.Fatalf("%d requests sent, want the 5 made before the deletion", n)
	}
}
