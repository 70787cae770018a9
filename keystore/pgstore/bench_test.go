package pgstore_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/pgstore"
)

// benchPool opens a pool of up to 80 connections on a fresh schema, migrated.
func benchPool(b *testing.B) *pgxpool.Pool {
	cfg := testSchema(b)().Config() // a copy: raise its size and open a second pool with it
	cfg.MaxConns = 80
	big, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(big.Close)
	if err := pgstore.Migrate(context.Background(), big); err != nil {
		b.Fatal(err)
	}
	return big
}

// benchRecord is a pending record as a client persists it before the first send: a UUIDv4
// key and intent, headers, a ~500-byte JSON body.
func benchRecord() *keystore.Record {
	key := uuid.NewString()
	now := time.Now()
	return &keystore.Record{
		Scope: "tenant-42", Key: key, Intent: "order-" + uuid.NewString(),
		Fingerprint: strings.Repeat("ab", 32),
		Request: keystore.Request{
			Method: http.MethodPost, URL: "/v1/payments",
			Header: http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {key}},
			Body:   []byte(`{"amount":1000,"currency":"eur","description":"` + strings.Repeat("x", 450) + `"}`),
		},
		State: keystore.StatePending, CreatedAt: now, UpdatedAt: now,
	}
}

// runConcurrent calls op b.N times from c goroutines and reports persists/s.
func runConcurrent(b *testing.B, c int, op func() error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range c {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := op(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "persists/s")
}

// BenchmarkPersist measures durable inserts per second at 1, 8 and 64 concurrent callers:
// "raw-insert" is the baseline, one plain pgx INSERT of the same 22 columns (values prepared
// outside the loop but for the key) into a table with the same indexes; "store" is
// Store.Create of a fresh record (validation, secret stripping, JSON headers, ON CONFLICT for
// the key and intent checks). Run against a server with fsync on for durable figures.
func BenchmarkPersist(b *testing.B) {
	for _, c := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("raw-insert/c=%d", c), func(b *testing.B) {
			pool := benchPool(b)
			ctx := context.Background()
			if _, err := pool.Exec(ctx, `CREATE TABLE raw_records (LIKE idem_records INCLUDING ALL)`); err != nil {
				b.Fatal(err)
			}
			tmpl := benchRecord()
			hdr := []byte(`{"Content-Type":["application/json"],"Idempotency-Key":["` + tmpl.Key + `"]}`)
			runConcurrent(b, c, func() error {
				key := []byte(uuid.NewString())
				_, err := pool.Exec(ctx, `INSERT INTO raw_records (tenant, key, intent, fingerprint, method, url,
					request_header, request_body, state, attempts, last_status, reason, not_executed, error,
					created_ns, updated_ns, fence, note)
					VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'pending', 0, 0, '', false, '', $9, $9, 0, '')`,
					[]byte(tmpl.Scope), key, append([]byte("order-"), key...), tmpl.Fingerprint, tmpl.Request.Method,
					tmpl.Request.URL, hdr, tmpl.Request.Body, time.Now().UnixNano())
				return err
			})
		})
		b.Run(fmt.Sprintf("store/c=%d", c), func(b *testing.B) {
			pool := benchPool(b)
			s, err := pgstore.Open(context.Background(), pool, nil)
			if err != nil {
				b.Fatal(err)
			}
			runConcurrent(b, c, func() error { return s.Create(context.Background(), benchRecord()) })
		})
	}
}

// BenchmarkReclaim measures orphan reclaim: 10,000 pending records whose lease expired,
// claimed with ClaimExpired (batches of 100) by 1 recoverer (the baseline) and by 8
// concurrent recoverers on separate Stores. It fails if any record is handed out twice, and
// reports records/s and dup-claims (always 0 when it passes).
func BenchmarkReclaim(b *testing.B) {
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("recoverers=%d", n), func(b *testing.B) { benchReclaim(b, n) })
	}
}

func benchReclaim(b *testing.B, recoverers int) {
	const orphans, batch = 10000, 100
	ctx := context.Background()
	pool := benchPool(b)
	stores := make([]*pgstore.Store, recoverers)
	for i := range stores {
		s, err := pgstore.Open(ctx, pool, nil)
		if err != nil {
			b.Fatal(err)
		}
		stores[i] = s
	}
	dead := time.Now()
	var total time.Duration
	for range b.N {
		b.StopTimer()
		if _, err := pool.Exec(ctx, `TRUNCATE idem_records`); err != nil {
			b.Fatal(err)
		}
		rows := make([][]any, orphans)
		for i := range rows {
			rec := benchRecord()
			rec.Owner, rec.LeaseUntil, rec.Fence = "dead-instance", dead, 1
			rows[i] = []any{[]byte(rec.Scope), []byte(rec.Key), []byte(rec.Intent), rec.Fingerprint, rec.Request.Method,
				rec.Request.URL, []byte(`{}`), rec.Request.Body, "pending", int64(1), int64(0), "", false, "",
				rec.CreatedAt.UnixNano(), rec.UpdatedAt.UnixNano(), rec.Owner, rec.LeaseUntil.UnixNano(), rec.Fence, ""}
		}
		_, err := pool.CopyFrom(ctx, pgx.Identifier{"idem_records"}, []string{"tenant", "key", "intent", "fingerprint",
			"method", "url", "request_header", "request_body", "state", "attempts", "last_status", "reason",
			"not_executed", "error", "created_ns", "updated_ns", "owner", "lease_until_ns", "fence", "note"}, pgx.CopyFromRows(rows))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `ANALYZE idem_records`); err != nil {
			b.Fatal(err)
		}
		var (
			mu     sync.Mutex
			claims = make(map[string]int, orphans)
			wg     sync.WaitGroup
		)
		now := time.Now()
		b.StartTimer()
		start := time.Now()
		for i, s := range stores {
			wg.Go(func() {
				l := keystore.Lease{Owner: fmt.Sprintf("recoverer-%d", i), Now: now, Until: now.Add(time.Minute)}
				for {
					got, err := s.ClaimExpired(ctx, l, batch)
					if err != nil {
						b.Error(err)
						return
					}
					if len(got) == 0 {
						return
					}
					mu.Lock()
					for _, r := range got {
						claims[r.Key]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		total += time.Since(start)
		b.StopTimer()
		dups := 0
		for _, c := range claims {
			dups += c - 1
		}
		if dups != 0 || len(claims) != orphans {
			b.Fatalf("%d records claimed, %d duplicate claims; want %d and 0", len(claims), dups, orphans)
		}
	}
	b.ReportMetric(float64(orphans*b.N)/total.Seconds(), "records/s")
	b.ReportMetric(0, "dup-claims")
}
