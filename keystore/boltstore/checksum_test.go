package boltstore_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// entry is one key and value of a bucket, as bbolt holds them.
type entry struct {
	bucket string
	k, v   []byte
}

func entries(t *testing.T, path string, buckets ...string) []entry {
	t.Helper()
	var out []entry
	db, err := bbolt.Open(path, 0, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bbolt.Tx) error {
		for _, b := range buckets {
			err := tx.Bucket([]byte(b)).ForEach(func(k, v []byte) error {
				out = append(out, entry{b, append([]byte(nil), k...), append([]byte(nil), v...)})
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// replace swaps entry from for to in a closed file.
func replace(t *testing.T, path string, from, to entry) {
	t.Helper()
	rawUpdate(t, path, func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte(from.bucket))
		if err := b.Delete(from.k); err != nil {
			return err
		}
		return b.Put(to.k, to.v)
	})
}

// One changed byte anywhere in a record or an intent index entry, key or value, is damage:
// the intent's lookup returns ErrCorrupt (never a miss, which would mint a new key and pay
// the intent again, nor another record) and Verify reports it. The changes are made through
// bbolt, so every page stays well formed and in order, as "ord-99" -> "ord-9:" does.
func TestOneChangedByteIsDamage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	s := open(t, path, nil)
	recs := map[string]*keystore.Record{}
	for _, r := range []struct{ key, intent string }{{"k-1", "ord-99"}, {"k-2", "ord-98"}, {"k-3", ""}} {
		rec := record("t", r.key)
		rec.Intent = r.intent
		recs[r.key] = rec
		if err := s.Create(bg, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	cases, pendingIndexCases := 0, 0
	for _, e := range entries(t, path, "records", "intents", "intenthash", "unleased", "leased") {
		// Every byte of keys and index values (the pending index included); every 17th byte of a record's JSON (and
		// its first 8: checksum, flags), to keep the test quick.
		var spots []struct {
			inKey bool
			i     int
		}
		for i := range e.k {
			spots = append(spots, struct {
				inKey bool
				i     int
			}{true, i})
		}
		for i := range e.v {
			if e.bucket != "records" || i < 8 || i%17 == 0 {
				spots = append(spots, struct {
					inKey bool
					i     int
				}{false, i})
			}
		}
		for _, sp := range spots {
			to := entry{e.bucket, append([]byte(nil), e.k...), append([]byte(nil), e.v...)}
			if sp.inKey {
				to.k[sp.i]++
			} else {
				to.v[sp.i]++
			}
			name := fmt.Sprintf("%s %q key=%v byte %d", e.bucket, e.k, sp.inKey, sp.i)
			replace(t, path, e, to)
			cases++
			if e.bucket == "unleased" || e.bucket == "leased" {
				pendingIndexCases++
			}
			func() {
				s := open(t, path, nil)
				defer s.Close()
				rep, err := s.Verify(bg)
				if err != nil {
					t.Fatalf("%s: Verify: %v", name, err)
				}
				if len(rep.Problems) == 0 {
					t.Errorf("%s: Verify found nothing", name)
				}
				for _, intent := range []string{"ord-99", "ord-98"} {
					rec, err := s.GetByIntent(bg, "t", intent)
					if err == nil && recs[rec.Key].Intent == intent {
						continue // this intent's entries and record are intact
					}
					if !errors.Is(err, boltstore.ErrCorrupt) {
						t.Errorf("%s: GetByIntent(%s) = %v, %v; want the record or ErrCorrupt", name, intent, rec, err)
					}
				}
			}()
			replace(t, path, to, e)
		}
	}
	s = open(t, path, nil)
	defer s.Close()
	if rep, err := s.Verify(bg); err != nil || len(rep.Problems) != 0 || rep.Records != 3 || rep.Intents != 2 {
		t.Fatalf("restored file: Verify = %+v, %v", rep, err)
	}
	if cases < 100 || pendingIndexCases == 0 {
		t.Fatalf("only %d cases, %d in the pending index", cases, pendingIndexCases)
	}
}
