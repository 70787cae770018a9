package boltstore_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// Opened by a symbolic link, the file is locked by its own name: a second Open by the
// file's path, after the file was deleted and while the first Store lives, is refused.
func TestAdvSymlinkEscapesLockFile(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real.db")
	link := filepath.Join(dir, "link.db")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	open(t, real, nil).Close() // the file exists: a link to no file is refused
	s1 := open(t, link, nil)
	defer s1.Close()
	if err := s1.Create(bg, record("t", "k-1")); err != nil {
		t.Fatal(err)
	}
	// While the file is there, bbolt's flock keeps a second Open off: good.
	if _, err := boltstore.Open(real, &boltstore.Options{Timeout: 100 * time.Millisecond}); !errors.Is(err, boltstore.ErrLocked) {
		t.Errorf("second Open via the real path while held: %v, want ErrLocked", err)
	}
	if err := os.Remove(real); err != nil {
		t.Fatal(err)
	}
	s2, err := boltstore.Open(real, &boltstore.Options{Timeout: 100 * time.Millisecond})
	if err == nil {
		defer s2.Close()
		_, gerr := s2.GetByIntent(bg, "t", "intent-k-1")
		t.Errorf("Open via the real path after the held file was deleted succeeded while the first Store lives (GetByIntent of its intent: %v): the lock file %s.lock is not the one the first took (%s.lock)", gerr, real, link)
	}
}

// A dangling symlink as the keystore path: Open creates the file through it non-atomically.
func TestAdvDanglingSymlink(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "link.db")
	if err := os.Symlink(filepath.Join(dir, "gone", "..", "target.db"), link); err != nil {
		t.Fatal(err)
	}
	s, err := boltstore.Open(link, nil)
	if err == nil {
		s.Close()
		t.Error("Open of a dangling symlink succeeded")
	}
	// a dangling symlink to a plain missing file
	link2 := filepath.Join(dir, "link2.db")
	_ = os.Symlink(filepath.Join(dir, "target2.db"), link2)
	s, err = boltstore.Open(link2, nil)
	if err == nil {
		s.Close()
		t.Error("Open of a dangling symlink (target in the same directory) succeeded")
	}
}

// Lock file trouble: a directory is refused; a removed lock file is made again. (A read-only
// one is only logged: root, as tests run here, opens it anyway.)
func TestAdvLockFileOddities(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.db")
	if err := os.Mkdir(p+".lock", 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := boltstore.Open(p, nil)
	if err == nil {
		t.Error("Open with a directory as its lock file succeeded")
	}
	p2 := filepath.Join(dir, "b.db")
	s := open(t, p2, nil)
	_ = s.Close()
	_ = os.Chmod(p2+".lock", 0o400)
	s, err = boltstore.Open(p2, nil)
	t.Logf("lock read-only (as %d): %v", os.Getuid(), err)
	if err == nil {
		s.Close()
	}
	_ = os.Remove(p2 + ".lock")
	s, err = boltstore.Open(p2, nil)
	if err != nil {
		t.Fatalf("Open after its lock file was removed: %v (the lock file is made again)", err)
	}
	s.Close()
}

// Quarantining the same key twice (the settled record damaged again) is refused: the first
// entry, its damaged bytes and its operator's verdict, is kept.
func TestAdvQuarantineTwiceKeepsFirst(t *testing.T) {
	path := withIntents(t, "k-1")
	first := damageValue(t, path, "k-1")
	s := open(t, path, nil)
	if _, err := s.Quarantine(bg, "t", "k-1", boltstore.Verdict{Executed: true, Note: "a"}); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	rawUpdate(t, path, func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("records"))
		k := []byte("\x01tk-1")
		v := append([]byte(nil), b.Get(k)...)
		v[len(v)-2] ^= 1
		return b.Put(k, v)
	})
	s = open(t, path, nil)
	defer s.Close()
	if _, err := s.Quarantine(bg, "t", "k-1", boltstore.Verdict{Executed: false, Note: "b"}); !errors.Is(err, keystore.ErrExists) {
		t.Fatalf("second Quarantine of (t, k-1): %v, want keystore.ErrExists", err)
	}
	q, err := s.Quarantined(bg)
	if err != nil {
		t.Fatal(err)
	}
	if len(q) != 1 || string(q[0].Value) != string(first) || !q[0].Executed || q[0].Note != "a" {
		t.Errorf("the first quarantined entry (damaged bytes, executed, note a) is not kept as it was: %+v", q)
	}
}

// Quarantine takes the intent from damaged JSON when no index names the key, without looking
// whether that intent already belongs to another sound record.
func TestAdvQuarantineStealsIntent(t *testing.T) {
	path := withIntents(t, "k-1", "k-2")
	// k-2's JSON is damaged to claim k-1's intent, and k-2's own intent entries are gone.
	rawUpdate(t, path, func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("records"))
		k := []byte("\x01tk-2")
		v := append([]byte(nil), b.Get(k)...)
		i := indexOf(v, `"ord-k-2"`)
		v[i+len(`"ord-k-`)] = '1'
		if err := b.Put(k, v); err != nil {
			return err
		}
		ik := []byte("\x01tord-k-2")
		_ = tx.Bucket([]byte("intents")).Delete(ik)
		c := tx.Bucket([]byte("intenthash")).Cursor()
		for hk, hv := c.First(); hk != nil; hk, hv = c.Next() {
			if indexOf(hv, "ord-k-2") >= 0 {
				return tx.Bucket([]byte("intenthash")).Delete(hk)
			}
		}
		return nil
	})
	s := open(t, path, nil)
	defer s.Close()
	before, err := s.GetByIntent(bg, "t", "ord-k-1")
	if err != nil || before.Key != "k-1" {
		t.Fatalf("before: %v %v", before, err)
	}
	if _, err := s.Quarantine(bg, "t", "k-2", boltstore.Verdict{Executed: false, Note: "ops"}); err != nil {
		t.Logf("Quarantine refused: %v", err)
		return
	}
	after, err := s.GetByIntent(bg, "t", "ord-k-1")
	if err == nil && after.Key != "k-1" {
		t.Errorf("Quarantine of (t, k-2) re-pointed the intent ord-k-1 of sound pending record k-1 at k-2 (state %s): k-1 is lost to its intent", after.State)
	}
}

func indexOf(b []byte, s string) int {
	for i := 0; i+len(s) <= len(b); i++ {
		if string(b[i:i+len(s)]) == s {
			return i
		}
	}
	return -1
}

// One changed byte in a pending record's "unleased" index entry: ClaimExpired (Recover) must
// still find the pending record, or a tool must rebuild the entry.
func TestAdvDamagedUnleasedEntryLosesRecovery(t *testing.T) {
	path := withIntents(t, "k-1")
	rawUpdate(t, path, func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("unleased"))
		var k []byte
		_ = b.ForEach(func(ik, _ []byte) error { k = append([]byte(nil), ik...); return nil })
		if k == nil {
			t.Fatal("no unleased entry")
		}
		if err := b.Delete(k); err != nil {
			return err
		}
		k[len(k)-1] ^= 0x01 // "k-1" -> "k-0": the key part of the entry
		return b.Put(k, nil)
	})
	s := open(t, path, nil)
	defer s.Close()
	rep, _ := s.Verify(bg)
	if len(rep.Problems) == 0 {
		t.Fatal("Verify found nothing in a changed pending index entry")
	}
	if _, err := s.RebuildIntentIndex(bg); err != nil {
		t.Fatalf("RebuildIntentIndex: %v", err)
	}
	l := keystore.Lease{Owner: "o", Now: time.Now().Add(24 * time.Hour), Until: time.Now().Add(25 * time.Hour)}
	got, err := s.ClaimExpired(bg, l, 10)
	if err != nil || len(got) != 1 {
		t.Errorf("ClaimExpired after one changed byte in the pending index: %d records, %v: the pending record (t, k-1) is never recovered", len(got), err)
	}
	if rep, _ = s.Verify(bg); len(rep.Problems) != 0 {
		t.Errorf("Verify after the rebuild: %v", rep.Problems)
	}
}

func TestAdvDamagedUnleasedEntryRecover(t *testing.T) {
	path := withIntents(t, "k-1")
	rawUpdate(t, path, func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("unleased"))
		var k []byte
		_ = b.ForEach(func(ik, _ []byte) error { k = append([]byte(nil), ik...); return nil })
		_ = b.Delete(k)
		k[len(k)-1] ^= 0x01
		return b.Put(k, nil)
	})
	s := open(t, path, nil)
	defer s.Close()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(201)
	}))
	defer srv.Close()
	c, err := idem.NewClient(idem.Config{BaseURL: srv.URL, Store: s})
	if err != nil {
		t.Fatal(err)
	}
	// The record the changed entry hid from ClaimExpired is still found by Recover's listing.
	rep, err := c.Recover(bg, nil)
	if err != nil || rep.Pending != 1 {
		t.Fatalf("Recover = %+v, %v: want the pending record found (server hits %d)", rep, err, hits.Load())
	}
	if _, err := s.Get(bg, "t", "k-1"); err != nil {
		t.Fatalf("Get after Recover: %v", err)
	}
}

// A zero KeyRing (the type is exported, its fields are not) is refused by Open, never a
// panic at the first write.
func TestAdvZeroKeyRing(t *testing.T) {
	_, err := boltstore.Open(filepath.Join(t.TempDir(), "keys.db"), &boltstore.Options{KeyRing: &keystore.KeyRing{}})
	if !errors.Is(err, keystore.ErrInvalid) {
		t.Fatalf("Open with a zero KeyRing: %v, want keystore.ErrInvalid", err)
	}
}
