package boltstore_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.etcd.io/bbolt"
)

// BenchmarkFreelist measures a lone durable write (one ~1 KiB put, one commit) in a fresh
// file and after 200k such records were written and then purged in batches of 256, for
// bbolt's freelist options: "array-sync" is bbolt's default, "map-sync" keeps the freelist
// as a map, "map-nosync" also stops writing the freelist at each commit (Open rebuilds it).
// The ratio purged/fresh of each variant is what matters: a freelist written in full at
// every commit makes every commit after a large purge slower.
func BenchmarkFreelist(b *testing.B) {
	variants := []struct {
		name   string
		typ    bbolt.FreelistType
		noSync bool
	}{
		{"array-sync", bbolt.FreelistArrayType, false},
		{"map-sync", bbolt.FreelistMapType, false},
		{"map-nosync", bbolt.FreelistMapType, true},
	}
	for _, v := range variants {
		for _, purged := range []int{0, 200_000} {
			name := v.name + "/fresh"
			if purged > 0 {
				name = v.name + "/purged-200k"
			}
			b.Run(name, func(b *testing.B) {
				db, err := bbolt.Open(filepath.Join(b.TempDir(), "f.db"), 0o600,
					&bbolt.Options{Timeout: time.Second, FreelistType: v.typ, NoFreelistSync: v.noSync})
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				bucket := []byte("records")
				value := make([]byte, 1024)
				keys := make([][]byte, purged)
				for i := range keys {
					k := uuid.New()
					keys[i] = k[:]
				}
				err = db.Update(func(tx *bbolt.Tx) error { _, err := tx.CreateBucket(bucket); return err })
				for i := 0; i < purged && err == nil; i += 10_000 {
					err = db.Update(func(tx *bbolt.Tx) error {
						for _, k := range keys[i:min(i+10_000, purged)] {
							if err := tx.Bucket(bucket).Put(k, value); err != nil {
								return err
							}
						}
						return nil
					})
				}
				for i := 0; i < purged && err == nil; i += 256 {
					err = db.Update(func(tx *bbolt.Tx) error {
						for _, k := range keys[i:min(i+256, purged)] {
							if err := tx.Bucket(bucket).Delete(k); err != nil {
								return err
							}
						}
						return nil
					})
				}
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for b.Loop() {
					k := uuid.New()
					if err := db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucket).Put(k[:], value) }); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
