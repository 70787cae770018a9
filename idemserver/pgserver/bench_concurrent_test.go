package pgserver_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// concurrentClients is how many clients BenchmarkPostgresConcurrent runs at once.
const concurrentClients = 16

// concurrentRound is how many requests one variant serves in one round of
// BenchmarkPostgresConcurrent, before the next variant's round.
const concurrentRound = 256

// BenchmarkPostgresConcurrent serves fresh-key POSTs from 16 concurrent clients over loopback
// to three handlers that each insert one payment row (paymentHandlers: insert alone; BEGIN,
// INSERT, COMMIT; the INSERT behind the middleware on this backend), in rounds of 256 requests
// per variant, the variants alternating round by round (their order rotating), so that a
// shared machine's drift hits all three alike. b.N is the number of requests per variant. It
// reports each variant's requests per second, idemserver's throughput as a fraction of the
// other two's (the target: idem/tx >= 0.7), and the statements and round trips per request
// each variant sent PostgreSQL (counted on the wire: countWire). Per request and variant it
// also reports the WAL written (walB: the server's insert position around each round) and,
// on Linux with the server on this host, the CPU time of PostgreSQL's processes (pgCPUus)
// and of this process (goCPUus, the clients' included), which a loaded machine moves less
// than throughput; and once, the key table's updates per fresh key and the share of them
// that were HOT (idem-hot/upd, from pg_stat_user_tables). One pool of 32 connections serves
// all three. Needs IDEM_TEST_PG_DSN; run it against a server with fsync on for a
// durable commit (docs/PERFORMANCE.md, section i).
func BenchmarkPostgresConcurrent(b *testing.B) {
	var wire wireCount
	pool := testPoolWith(b, 32, func(c *pgxpool.Config) { countWire(c, &wire) })
	insert, tx, idem := paymentHandlers(b, pool)
	variants := []struct {
		name      string
		srv       *httptest.Server
		elapsed   time.Duration
		n         int64
		stmts, rt int64
		wal       int64
		pgCPU     time.Duration
		goCPU     time.Duration
	}{{name: "insert", srv: httptest.NewServer(insert)}, {name: "tx", srv: httptest.NewServer(tx)}, {name: "idem", srv: httptest.NewServer(idem)}}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * concurrentClients, MaxConnsPerHost: 2 * concurrentClients}}
	defer hc.CloseIdleConnections()
	for i := range variants {
		defer variants[i].srv.Close()
		concurrentBurst(b, hc, variants[i].srv.URL, 2*concurrentClients) // warm: connections, prepared statements
	}
	cpu := newServerCPU(b, pool)
	b.ResetTimer()
	for done, round := 0, 0; done < b.N; round++ {
		k := min(concurrentRound, b.N-done)
		for j := range variants {
			v := &variants[(round+j)%len(variants)]
			w0 := walPosition(b, pool)
			c0, g0 := cpu.used(), processCPU()
			s0, r0 := wire.snapshot()
			t0 := time.Now()
			concurrentBurst(b, hc, v.srv.URL, k)
			v.elapsed += time.Since(t0)
			s1, r1 := wire.snapshot()
			v.n, v.stmts, v.rt = v.n+int64(k), v.stmts+s1-s0, v.rt+r1-r0
			v.pgCPU, v.goCPU = v.pgCPU+cpu.used()-c0, v.goCPU+processCPU()-g0
			v.wal += walPosition(b, pool) - w0
		}
		done += k
	}
	b.StopTimer()
	rate := map[string]float64{}
	for _, v := range variants {
		rate[v.name] = float64(v.n) / v.elapsed.Seconds()
		b.ReportMetric(rate[v.name], v.name+"-req/s")
		b.ReportMetric(float64(v.stmts)/float64(v.n), v.name+"-stmts/req")
		b.ReportMetric(float64(v.rt)/float64(v.n), v.name+"-roundtrips/req")
		b.ReportMetric(float64(v.wal)/float64(v.n), v.name+"-walB/req")
		if cpu != nil {
			b.ReportMetric(float64(v.pgCPU.Microseconds())/float64(v.n), v.name+"-pgCPUus/req")
			b.ReportMetric(float64(v.goCPU.Microseconds())/float64(v.n), v.name+"-goCPUus/req")
		}
	}
	keys := variants[2].n + 2*concurrentClients // the warm-up's too
	upd, hot := keyUpdates(b, pool, keys)
	b.ReportMetric(float64(upd)/float64(keys), "idem-upd/req")
	b.ReportMetric(float64(hot)/float64(max(upd, 1)), "idem-hot/upd")
	b.ReportMetric(rate["idem"]/rate["tx"], "idem/tx")
	b.ReportMetric(rate["idem"]/rate["insert"], "idem/insert")
}

// walPosition is the server's WAL insert position in bytes: its difference around a round
// is the WAL that round wrote (autovacuum's included, which falls on all variants alike).
func walPosition(b *testing.B, pool *pgxpool.Pool) int64 {
	var pos int64
	if err := pool.QueryRow(context.Background(), "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint").Scan(&pos); err != nil {
		b.Fatal(err)
	}
	return pos
}

// keyUpdates returns the key table's updated rows and how many of those were HOT (heap-only:
// no index entry written), from pg_stat_user_tables. A backend reports its counts when it
// goes idle for a while or exits, so the pool's connections are closed first, and the counts
// are read until they account for want updates (one per fresh key) or a few seconds pass.
func keyUpdates(b *testing.B, pool *pgxpool.Pool, want int64) (upd, hot int64) {
	pool.Reset()
	ctx := context.Background()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err := pool.QueryRow(ctx, "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = 'idem_server_keys'::regclass").Scan(&upd, &hot); err != nil {
			b.Fatal(err)
		}
		if upd >= want || time.Now().After(deadline) {
			return upd, hot
		}
	}
}

// concurrentBurst sends n fresh-key POSTs to url from concurrentClients goroutines and
// returns when all are answered; any answer but 201 fails b.
func concurrentBurst(b *testing.B, hc *http.Client, url string, n int) {
	var wg sync.WaitGroup
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	for range concurrentClients {
		wg.Go(func() {
			for range next {
				req, _ := http.NewRequest(http.MethodPost, url+"/v1/payments", bytes.NewReader(benchBody))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer sk_test")
				req.Header.Set("Idempotency-Key", uuid.NewString())
				resp, err := hc.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					b.Errorf("status %d: %s", resp.StatusCode, body)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}
