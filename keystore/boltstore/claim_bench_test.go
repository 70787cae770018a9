package boltstore

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
)

// BenchmarkClaimExpired measures the store's half of a Recover after an outage: N pending
// records of an instance that died, their leases expired, under random UUIDv4 keys, claimed
// by ClaimExpired in batches of 128 until none is left. It reports the claims per second
// over the whole drain ("records/s"), the first call's time in ms (it also moves every
// expired lease to the unleased index, in commits of 1,024 between which other writers
// commit) and the slowest of the other calls in ms (one commit of 128 claims). The records are
// written straight into the file (records and index, 100,000 a transaction), so N=1,000,000
// sets up in seconds. Sizes: IDEM_BENCH_CLAIM_SIZES (comma-separated, default
// "10000,100000"). Run with -benchtime 1x.
func BenchmarkClaimExpired(b *testing.B) {
	sizes := []int{10_000, 100_000}
	if env := os.Getenv("IDEM_BENCH_CLAIM_SIZES"); env != "" {
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("IDEM_BENCH_CLAIM_SIZES: %q is not a count", f)
			}
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			var elapsed, first, slowest time.Duration
			for range b.N {
				b.StopTimer()
				s, err := Open(filepath.Join(b.TempDir(), "keys.db"), nil)
				if err != nil {
					b.Fatal(err)
				}
				t0 := time.Now().Add(-2 * time.Hour)
				fillExpired(b, s, n, t0)
				l := keystore.Lease{Owner: "me", Now: time.Now(), Until: time.Now().Add(time.Hour)}
				claimed := 0
				b.StartTimer()
				start := time.Now()
				for call := 0; ; call++ {
					c0 := time.Now()
					got, err := s.ClaimExpired(b.Context(), l, 128)
					if call == 0 {
						first = max(first, time.Since(c0))
					} else {
						slowest = max(slowest, time.Since(c0))
					}
					if err != nil {
						b.Fatal(err)
					}
					if len(got) == 0 {
						break
					}
					claimed += len(got)
				}
				elapsed += time.Since(start)
				b.StopTimer()
				if claimed != n {
					b.Fatalf("claimed %d of %d", claimed, n)
				}
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "records/s")
			b.ReportMetric(float64(first.Microseconds())/1e3, "first-call-ms")
			b.ReportMetric(float64(slowest.Microseconds())/1e3, "slowest-other-call-ms")
		})
	}
}

// fillExpired writes n pending records (about 400 bytes each) whose owner's lease expired an
// hour after t0, created 10 µs apart from t0, with their index entries.
func fillExpired(b *testing.B, s *Store, n int, t0 time.Time) {
	const perTx = 100_000
	for done := 0; done < n; {
		err := s.db.Update(func(tx *bbolt.Tx) error {
			records := tx.Bucket(bucketRecords)
			for i := done; i < min(n, done+perTx); i++ {
				created := t0.Add(time.Duration(i) * 10 * time.Microsecond)
				rec := &keystore.Record{Key: uuid.NewString(), Fingerprint: "fp", State: keystore.StatePending, Attempts: 1,
					Request:   keystore.Request{Method: "POST", URL: "/v1/payments", Body: []byte(`{"amount":1000,"currency":"eur"}`)},
					CreatedAt: created, UpdatedAt: created, Owner: "dead", LeaseUntil: t0.Add(time.Hour), Fence: 1}
				e, err := encode(rec, nil, &codec{})
				if err != nil {
					return err
				}
				if err := records.Put(e.key, e.value); err != nil {
					return err
				}
				if err := reindex(tx, e.key, nil, e.rec); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		done = min(n, done+perTx)
	}
}
