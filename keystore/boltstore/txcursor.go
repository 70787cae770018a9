package boltstore

import (
	"bytes"

	"go.etcd.io/bbolt"
)

// txCursors lends the commit under way one cursor per bucket for its point lookups and
// deletes. bbolt's Bucket.Get and Bucket.Delete make a cursor each, whose stack of pages grows
// from empty every time: about 2.4 allocations a lookup, and a durable call's Create and final
// write make four of them (the record's lookup in each, and the two index deletes). A cursor
// repositions from the bucket's root on every Seek, so reusing it after a write in the same
// transaction is sound. Only the committer's transactions use it, one at a time (the
// committer runs one commit at a time, and bbolt one write transaction), so it needs no lock;
// it holds the transaction it serves, so that a later transaction, compared by address,
// cannot be mistaken for it.
type txCursors struct {
	tx  *bbolt.Tx
	cur [3]*bbolt.Cursor // indexed by the cursor* constants
}

const (
	cursorRecords = iota
	cursorUnleased
	cursorLeased
)

var cursorBuckets = [...][]byte{cursorRecords: bucketRecords, cursorUnleased: bucketUnleased, cursorLeased: bucketLeased}

// cursor returns the cursor of bucket i (a cursor* constant) for tx, made at its first use in
// tx. A nil t makes a new cursor every time.
func (t *txCursors) cursor(tx *bbolt.Tx, i int) *bbolt.Cursor {
	if t == nil {
		return tx.Bucket(cursorBuckets[i]).Cursor()
	}
	if t.tx != tx {
		*t = txCursors{tx: tx}
	}
	// The bucket is looked up every time (a map lookup in the transaction's cache): a
	// commit that deletes and recreates it (RebuildIntentIndex) leaves a cursor of the old
	// one, which bbolt cannot walk.
	b := tx.Bucket(cursorBuckets[i])
	if t.cur[i] == nil || t.cur[i].Bucket() != b {
		t.cur[i] = b.Cursor()
	}
	return t.cur[i]
}

// release forgets the transaction, once it has ended, so that its pages are not kept.
func (t *txCursors) release() { *t = txCursors{} }

// get is Bucket.Get of bucket i through its cursor: the value under key, nil if there is none
// (or if key names a nested bucket, which these buckets never hold).
func (t *txCursors) get(tx *bbolt.Tx, i int, key []byte) []byte {
	k, v := t.cursor(tx, i).Seek(key)
	if !bytes.Equal(k, key) {
		return nil
	}
	return v
}

// del is Bucket.Delete of bucket i through its cursor: nothing to do when key is absent.
func (t *txCursors) del(tx *bbolt.Tx, i int, key []byte) error {
	c := t.cursor(tx, i)
	if k, _ := c.Seek(key); !bytes.Equal(k, key) {
		return nil
	}
	return c.Delete()
}
