package boltstore

import (
	"fmt"
	"path/filepath"
	"testing"

	"go.etcd.io/bbolt"
)

// The commit's cursors see what the same transaction wrote before, through every lookup and
// delete, as bbolt's Bucket.Get and Bucket.Delete do, over a tree of several levels (the
// first transaction's pages) and the nodes the second one changes.
func TestTxCursorsMatchBucketOps(t *testing.T) {
	db, err := bbolt.Open(filepath.Join(t.TempDir(), "c.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	key := func(i int) []byte { return fmt.Appendf(nil, "key-%06d", i) }
	const n = 3000
	if err := db.Update(func(tx *bbolt.Tx) error {
		for _, b := range cursorBuckets {
			if _, err := tx.CreateBucket(b); err != nil {
				return err
			}
		}
		for i := 0; i < n; i += 2 { // even keys, on pages once committed
			if err := tx.Bucket(bucketRecords).Put(key(i), key(i)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var cur txCursors
	check := func(tx *bbolt.Tx, i int, when string) {
		t.Helper()
		want := tx.Bucket(bucketRecords).Get(key(i))
		if got := cur.get(tx, cursorRecords, key(i)); string(got) != string(want) {
			t.Fatalf("%s: key %d: cursor reads %q, the bucket %q", when, i, got, want)
		}
	}
	if err := db.Update(func(tx *bbolt.Tx) error {
		records := tx.Bucket(bucketRecords)
		for i := range n {
			check(tx, i, "before")
			if i%3 == 0 {
				if err := records.Put(key(i), []byte("new")); err != nil { // odd ones are new
					return err
				}
			}
			if i%5 == 0 {
				if err := cur.del(tx, cursorRecords, key(i)); err != nil {
					return err
				}
			}
			check(tx, i, "after")
			check(tx, i+1, "next")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	cur.release()
	if err := db.View(func(tx *bbolt.Tx) error {
		for i := range n {
			got := tx.Bucket(bucketRecords).Get(key(i))
			var want string
			switch {
			case i%5 == 0:
			case i%3 == 0:
				want = "new"
			case i%2 == 0:
				want = string(key(i))
			}
			if string(got) != want {
				t.Fatalf("committed key %d = %q, want %q", i, got, want)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if cur.tx != nil {
		t.Fatal("release kept the transaction")
	}
}
