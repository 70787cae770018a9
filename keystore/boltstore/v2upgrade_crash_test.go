package boltstore

import (
	"bytes"
	"context"
	"os"
	"reflect"
	"testing"

	"go.etcd.io/bbolt"
)

// A crash during Open's raise of a version 2 file to version 3: the commit's pages may be on
// disk while its meta page is not (or is torn). Either way the file opens at version 2 with
// every record as before, and Open raises it again.
func TestV2UpgradeInterrupted(t *testing.T) {
	ctx := context.Background()
	orig := gunzipFixture(t, "v2-plain.db")
	before, err := os.ReadFile(orig)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(orig, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(orig)
	if err != nil {
		t.Fatal(err)
	}
	const page = 4096
	var changedMeta int = -1
	for i := range 2 {
		if !bytes.Equal(before[i*page:(i+1)*page], after[i*page:(i+1)*page]) {
			changedMeta = i
		}
	}
	if changedMeta < 0 || len(after) < len(before) {
		t.Fatalf("upgrade changed no meta page (%d) or shrank the file", changedMeta)
	}
	hybrids := map[string][]byte{}
	old := bytes.Clone(after) // pages written, meta page not
	copy(old[:2*page], before[:2*page])
	hybrids["meta not written"] = old
	torn := bytes.Clone(after) // meta page torn inside the meta (its checksum fails)
	copy(torn[changedMeta*page+48:changedMeta*page+page], before[changedMeta*page+48:changedMeta*page+page])
	hybrids["meta torn"] = torn
	for name, b := range hybrids {
		t.Run(name, func(t *testing.T) {
			path := t.TempDir() + "/keys.db"
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			var v string
			_ = db.View(func(tx *bbolt.Tx) error { v = string(tx.Bucket(bucketMeta).Get(keySchema)); return nil })
			_ = db.Close()
			if v != "2" {
				t.Fatalf("schema %q after the interrupted raise, want 2", v)
			}
			s, err := Open(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, r := range v2FixtureRecords() {
				got, err := s.Get(ctx, r.Scope, r.Key)
				if err != nil {
					t.Fatal(err)
				}
				if want := viaJSON(t, r); !reflect.DeepEqual(got, want) {
					t.Errorf("Get %q = %+v, want %+v", r.Key, got, want)
				}
			}
			if rep, err := s.Verify(ctx); err != nil || len(rep.Problems) != 0 {
				t.Fatalf("Verify = %+v, %v", rep, err)
			}
		})
	}
}
