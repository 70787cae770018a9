package boltstore_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// withIntents makes a closed file holding a pending record under each key, with intent
// "ord-"+key.
func withIntents(t *testing.T, keys ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.db")
	s := open(t, path, nil)
	for _, k := range keys {
		rec := record("t", k)
		rec.Intent = "ord-" + k
		if err := s.Create(bg, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// damageValue changes one byte of the JSON of record (t, key) and returns the damaged value.
func damageValue(t *testing.T, path, key string) []byte {
	t.Helper()
	var v []byte
	rawUpdate(t, path, func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("records"))
		k := append([]byte("\x01t"), key...)
		v = append([]byte(nil), b.Get(k)...)
		i := bytes.Index(v, []byte(`"attempts":`)) + len(`"attempts":`)
		v[i]++ // 0 -> 1: still valid JSON, a record that Validate accepts
		return b.Put(k, v)
	})
	return v
}

// A damaged record blocked its intent for good: every Do of it failed with "keystore is
// corrupt" and no tool could set it aside. Quarantine, given the operator's verdict, keeps the
// damaged bytes and puts a settled record in its place, under the same intent.
func TestQuarantine(t *testing.T) {
	for _, executed := range []bool{true, false} {
		path := withIntents(t, "k-1", "k-2")
		damaged := damageValue(t, path, "k-1")
		s := open(t, path, nil)
		_, err := s.GetByIntent(bg, "t", "ord-k-1")
		wantIs(t, "GetByIntent of the damaged record", err, boltstore.ErrCorrupt)
		again := record("t", "k-new")
		again.Intent = "ord-k-1"
		wantIs(t, "Create under the blocked intent", s.Create(bg, again), keystore.ErrExists)

		_, err = s.Quarantine(bg, "t", "k-1", boltstore.Verdict{Executed: executed})
		wantIs(t, "Quarantine without a note", err, keystore.ErrInvalid)
		_, err = s.Quarantine(bg, "t", "k-2", boltstore.Verdict{Executed: executed, Note: "ops: ticket 7"})
		wantIs(t, "Quarantine of a sound record", err, boltstore.ErrNotDamaged)
		_, err = s.Quarantine(bg, "t", "k-none", boltstore.Verdict{Executed: executed, Note: "ops: ticket 7"})
		wantIs(t, "Quarantine of no record", err, keystore.ErrNotFound)

		at := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
		got, err := s.Quarantine(bg, "t", "k-1", boltstore.Verdict{Executed: executed, Note: "ops: ticket 7", Now: at})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := s.GetByIntent(bg, "t", "ord-k-1")
		if err != nil {
			t.Fatalf("GetByIntent after quarantine: %v", err)
		}
		wantState, wantReason := keystore.StateFailed, "not_executed"
		if executed {
			wantState, wantReason = keystore.StateSucceeded, "executed"
		}
		if rec.Key != "k-1" || rec.State != wantState || rec.Reason != wantReason || !rec.UpdatedAt.Equal(at) ||
			rec.Fingerprint != "fp-k-1" || got.State != wantState {
			t.Fatalf("executed=%v: record after quarantine %+v", executed, rec)
		}
		if executed && (rec.Response == nil || rec.Response.StatusCode != 200) {
			t.Fatalf("executed: response %+v", rec.Response)
		}
		q, err := s.Quarantined(bg)
		if err != nil || len(q) != 1 || q[0].Key != "k-1" || q[0].Intent != "ord-k-1" || q[0].Executed != executed ||
			!bytes.Equal(q[0].Value, damaged) || q[0].Note != "ops: ticket 7" {
			t.Fatalf("Quarantined = %+v, %v", q, err)
		}
		rep, err := s.Verify(bg)
		if err != nil || len(rep.Problems) != 0 || rep.Records != 2 || rep.Intents != 2 || rep.Quarantined != 1 {
			t.Fatalf("Verify after quarantine = %+v, %v", rep, err)
		}
		wantIs(t, "Create under the settled intent", s.Create(bg, again), keystore.ErrExists)
		_ = s.Close()
	}
}

// A byte changed in a record's key: the record sits under a key no index names, and its
// intent's entry names a key with no record. Quarantine of the damaged key puts the settled
// record back under the key its JSON and the index name.
func TestQuarantineDamagedKey(t *testing.T) {
	path := withIntents(t, "key-a")
	rawUpdate(t, path, func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("records"))
		v := append([]byte(nil), b.Get([]byte("\x01tkey-a"))...)
		if err := b.Delete([]byte("\x01tkey-a")); err != nil {
			return err
		}
		return b.Put([]byte("\x01tkey-b"), v)
	})
	s := open(t, path, nil)
	defer s.Close()
	_, err := s.GetByIntent(bg, "t", "ord-key-a")
	wantIs(t, "GetByIntent", err, boltstore.ErrCorrupt)
	_, err = s.RebuildIntentIndex(bg)
	wantIs(t, "RebuildIntentIndex with a damaged record", err, boltstore.ErrCorrupt)
	if _, err := s.Quarantine(bg, "t", "key-b", boltstore.Verdict{Executed: true, Note: "ops"}); err != nil {
		t.Fatal(err)
	}
	rec, err := s.GetByIntent(bg, "t", "ord-key-a")
	if err != nil || rec.Key != "key-a" || rec.State != keystore.StateSucceeded {
		t.Fatalf("GetByIntent = %+v, %v", rec, err)
	}
	if _, err := s.Get(bg, "t", "key-b"); !errors.Is(err, keystore.ErrNotFound) {
		t.Fatalf("Get of the damaged key: %v", err)
	}
	if rep, err := s.Verify(bg); err != nil || len(rep.Problems) != 0 {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
}

// RebuildIntentIndex rebuilds both indexes from the records: a lost entry is damage until
// then, and its intent is found again after.
func TestRebuildIntentIndex(t *testing.T) {
	path := withIntents(t, "k-1", "k-2", "k-3")
	rawUpdate(t, path, func(tx *bbolt.Tx) error {
		return tx.Bucket([]byte("intents")).Delete([]byte("\x01tord-k-2"))
	})
	s := open(t, path, nil)
	defer s.Close()
	_, err := s.GetByIntent(bg, "t", "ord-k-2")
	wantIs(t, "GetByIntent of the lost entry", err, boltstore.ErrCorrupt)
	rep, err := s.Verify(bg)
	if err != nil || len(rep.Problems) == 0 {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
	n, err := s.RebuildIntentIndex(bg)
	if err != nil || n != 3 {
		t.Fatalf("RebuildIntentIndex = %d, %v", n, err)
	}
	for _, k := range []string{"k-1", "k-2", "k-3"} {
		if rec, err := s.GetByIntent(bg, "t", "ord-"+k); err != nil || rec.Key != k {
			t.Fatalf("GetByIntent(ord-%s) = %v, %v", k, rec, err)
		}
	}
	if rep, err := s.Verify(bg); err != nil || len(rep.Problems) != 0 || rep.Intents != 3 {
		t.Fatalf("Verify after rebuild = %+v, %v", rep, err)
	}
}
