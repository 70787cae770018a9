package boltstore_test

import (
	"path/filepath"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore/boltstore"
)

// An intent index entry that names another intent's record (a damaged byte in the index) is
// ErrCorrupt, not that record: returned, it would end this intent with another's outcome.
func TestIntentIndexNamingAnotherRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	s := open(t, path, nil)
	for _, k := range []string{"k-a", "k-b"} {
		if err := s.Create(bg, record("t", k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error { // "\x01t" is scope "t", length-prefixed
		return tx.Bucket([]byte("intents")).Put([]byte("\x01tintent-k-a"), []byte("k-b"))
	})
	if cerr := db.Close(); err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}

	s = open(t, path, nil)
	defer s.Close()
	_, err = s.GetByIntent(bg, "t", "intent-k-a")
	wantIs(t, "GetByIntent of the damaged entry", err, boltstore.ErrCorrupt)
	for _, k := range []string{"k-a", "k-b"} { // the records themselves are sound
		if rec, err := s.Get(bg, "t", k); err != nil || rec.Intent != "intent-"+k {
			t.Fatalf("Get %s = %v, %v", k, rec, err)
		}
	}
	if rec, err := s.GetByIntent(bg, "t", "intent-k-b"); err != nil || rec.Key != "k-b" {
		t.Fatalf("GetByIntent of the sound entry = %v, %v", rec, err)
	}
}
