package boltstore_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// An undecodable pending record does not stop ClaimExpired: the orphans around it are
// claimed, and it is skipped and left as it was (ListPage reports it). Before, every call
// returned ErrCorrupt, so a fleet's background reclaim never took any orphan again.
func TestClaimExpiredSkipsDamagedRecords(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keys.db")
	now := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	s := open(t, path, nil)
	for i, k := range []string{"bad-summary", "bad-body", "good"} {
		at := now.Add(time.Duration(i) * time.Second) // the damaged ones sort first
		rec := &keystore.Record{Key: k, Fingerprint: "f", State: keystore.StatePending,
			Request:   keystore.Request{Method: http.MethodPost, URL: "/v1/payments", Body: []byte(`{"amount":1}`)},
			CreatedAt: at, UpdatedAt: at}
		if err := s.Create(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Damage two records' values, not the pages: one cut short, one with bytes of its body
	// changed (its checksum no longer matches).
	damaged := map[string][]byte{}
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("records"))
		for _, k := range []string{"bad-summary", "bad-body"} {
			key := append([]byte{0}, k...) // uvarint(len("")) || "" || key
			v := bytes.Clone(b.Get(key))
			if k == "bad-summary" {
				v = v[:len(v)/2]
			} else {
				i := bytes.Index(v, []byte(`{"amount":1}`))
				if i < 0 {
					t.Fatalf("no body in %q", v)
				}
				copy(v[i:], "!!!!")
			}
			damaged[k] = v
			if err := b.Put(key, v); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, path, nil)
	for _, k := range []string{"bad-summary", "bad-body"} {
		if _, err := s.Get(ctx, "", k); !errors.Is(err, boltstore.ErrCorrupt) {
			t.Fatalf("Get(%s) = %v, want ErrCorrupt (the damage is in place)", k, err)
		}
	}
	got, err := s.ClaimExpired(ctx, keystore.Lease{Owner: "me", Now: now.Add(time.Hour), Until: now.Add(2 * time.Hour)}, 10)
	if err != nil {
		t.Fatalf("ClaimExpired with damaged records beside the orphan: %v", err)
	}
	if len(got) != 1 || got[0].Key != "good" || got[0].Owner != "me" || got[0].Fence != 1 {
		t.Fatalf("ClaimExpired = %v, want the one good orphan, claimed", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(func(tx *bbolt.Tx) error {
		for k, want := range damaged {
			if v := tx.Bucket([]byte("records")).Get(append([]byte{0}, k...)); !bytes.Equal(v, want) {
				t.Errorf("%s changed on disk: %q, want %q", k, v, want)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
