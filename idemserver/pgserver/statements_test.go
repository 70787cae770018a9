package pgserver_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Statement budgets of one request through the middleware on this backend, counted on the
// wire (countWire), the handler's one INSERT included: a fresh key is BEGIN and the claim (one
// round trip), the handler's INSERT, the stored answer and COMMIT (one round trip); a replay
// is BEGIN and the claim, then ROLLBACK and the unlock of the key's lock (one round trip).
const (
	maxFreshStatements  = 5
	maxFreshRoundTrips  = 3
	maxReplayStatements = 4
	maxReplayRoundTrips = 2
)

// TestStatementsPerRequest holds the request path to its statement and round-trip budget
// (docs/PERFORMANCE.md, section i): a statement more per request is a regression this fails
// on, not one a benchmark may or may not show. Every request's answer is checked, and every
// key's replay, so that a path cheaper because it skipped its work cannot pass.
func TestStatementsPerRequest(t *testing.T) {
	var wire wireCount
	pool := testPoolWith(t, 4, func(c *pgxpool.Config) { countWire(c, &wire) })
	_, _, idem := paymentHandlers(t, pool)
	srv := httptest.NewServer(idem)
	defer srv.Close()
	post := func(key string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/payments", bytes.NewReader(benchBody))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer sk_test")
		req.Header.Set("Idempotency-Key", key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for range 3 { // warm: the pool's connections, pgx's prepared statements
		if code, body := post(uuid.NewString()); code != http.StatusCreated {
			t.Fatalf("warm-up: %d %s", code, body)
		}
	}
	const n = 20
	keys, answers := make([]string, n), make([]string, n)
	s0, r0 := wire.snapshot()
	for i := range keys {
		keys[i] = uuid.NewString()
		code, body := post(keys[i])
		if code != http.StatusCreated {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
		answers[i] = body
	}
	s1, r1 := wire.snapshot()
	for i, k := range keys {
		if code, body := post(k); code != http.StatusCreated || body != answers[i] {
			t.Fatalf("replay %d: %d %s, want 201 %s", i, code, body, answers[i])
		}
	}
	s2, r2 := wire.snapshot()
	check := func(what string, got int64, max int) {
		t.Helper()
		t.Logf("%s: %.2f per request", what, float64(got)/n)
		if got > int64(max*n) {
			t.Errorf("%s: %d for %d requests, %.2f each: the budget is %d", what, got, n, float64(got)/n, max)
		}
	}
	check("fresh key, statements", s1-s0, maxFreshStatements)
	check("fresh key, round trips", r1-r0, maxFreshRoundTrips)
	check("replay, statements", s2-s1, maxReplayStatements)
	check("replay, round trips", r2-r1, maxReplayRoundTrips)
	var rows int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM payments").Scan(&rows); err != nil || rows != n+3 {
		t.Fatalf("payments: %d rows (%v), want %d: each key executed once", rows, err, n+3)
	}
}
