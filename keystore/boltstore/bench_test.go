package boltstore_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// BenchmarkPersist measures durable writes per second at 1, 8 and 64 concurrent callers:
// "raw-update" is the baseline, one plain bbolt Update putting one pre-encoded ~1 KiB JSON
// record per op; "store" is Store.Create of a comparable record (JSON encoding, secret
// stripping, the key and intent checks and the intent index included). Files live in
// b.TempDir(), so set TMPDIR to a real disk, not a tmpfs, for meaningful figures.
// "filesN/c=64" is "store" over N files (N commit pipelines at once). Every variant also
// reports cpu-µs/op, the process's CPU time (user and system) per persist.
func BenchmarkPersist(b *testing.B) {
	for _, c := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("raw-update/c=%d", c), func(b *testing.B) { benchRaw(b, c) })
		b.Run(fmt.Sprintf("store/c=%d", c), func(b *testing.B) { benchStore(b, c) })
		if c == 64 {
			for _, n := range []int{2, 4} {
				b.Run(fmt.Sprintf("files%d/c=%d", n, c), func(b *testing.B) { benchStores(b, c, n) })
			}
		}
	}
}

// benchRecord is a pending record of about 1 KiB once encoded, under a random UUIDv4 key: the
// worst case (random keys touch random pages), which a caller's own keys (WithKey) may be;
// keys minted by NewOperation are UUIDv7 and land on the last pages.
func benchRecord(int) *keystore.Record {
	key := uuid.NewString()
	now := time.Now()
	return &keystore.Record{
		Scope: "tenant-42", Key: key, Intent: "order-" + key,
		Fingerprint: strings.Repeat("ab", 32),
		Request: keystore.Request{
			Method: http.MethodPost, URL: "/v1/payments",
			Header: http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {key}},
			Body:   []byte(`{"amount":1000,"currency":"eur","description":"` + strings.Repeat("x", 480) + `"}`),
		},
		State: keystore.StatePending, CreatedAt: now, UpdatedAt: now,
	}
}

// runConcurrent calls op b.N times from c goroutines and reports persists/s and the CPU
// time per persist.
func runConcurrent(b *testing.B, c int, op func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	for range c {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N {
					return
				}
				if err := op(i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "persists/s")
	if cpu := cpuTime() - cpu0; cpu > 0 {
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
	}
}

func benchRaw(b *testing.B, c int) {
	db, err := bbolt.Open(filepath.Join(b.TempDir(), "raw.db"), 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	bucket := []byte("records")
	if err := db.Update(func(tx *bbolt.Tx) error { _, err := tx.CreateBucket(bucket); return err }); err != nil {
		b.Fatal(err)
	}
	value, err := json.Marshal(benchRecord(0))
	if err != nil {
		b.Fatal(err)
	}
	runConcurrent(b, c, func(i int) error {
		return db.Update(func(tx *bbolt.Tx) error {
			return tx.Bucket(bucket).Put([]byte("tenant-42/"+uuid.NewString()), value)
		})
	})
	b.ReportMetric(float64(len(value)), "value-bytes")
}

func benchStore(b *testing.B, c int) {
	s, err := boltstore.Open(filepath.Join(b.TempDir(), "keys.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := b.Context()
	runConcurrent(b, c, func(i int) error { return s.Create(ctx, benchRecord(i)) })
}

// benchStores is benchStore over n files, op i going to file i%n: n commit pipelines at once.
func benchStores(b *testing.B, c, n int) {
	ss := make([]*boltstore.Store, n)
	for i := range ss {
		s, err := boltstore.Open(filepath.Join(b.TempDir(), fmt.Sprintf("keys%d.db", i)), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		ss[i] = s
	}
	ctx := b.Context()
	runConcurrent(b, c, func(i int) error { return ss[i%n].Create(ctx, benchRecord(i)) })
}
