package pgserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/pgserver"
	"github.com/jackc/pgx/v5/pgxpool"
)

// advServer is one "process": its own pool, backend, middleware and HTTP server on the shared
// schema of base.
func advServer(t *testing.T, base *pgxpool.Pool, maxConns int32, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	cfg := base.Config().Copy()
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	mw, err := idemserver.New(idemserver.Config{Backend: pgserver.New(pool), Tenant: bearerTenant})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(h))
	t.Cleanup(srv.Close)
	return srv
}

// advPay is the business handler: a payment, a pause, its outbox row, 201. X-Mode makes it
// panic or refuse (NotExecuted) after its first write, or run slow.
func advPay(w http.ResponseWriter, r *http.Request) {
	var p struct {
		Reference string `json:"reference"`
		Amount    int64  `json:"amount"`
	}
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		_ = idemserver.NotExecuted(r)
		http.Error(w, "bad", http.StatusBadRequest)
		return
	}
	tx, err := pgserver.MustTx(r.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	scope, _ := idemserver.KeyScope(r)
	var id int64
	if err := tx.QueryRow(r.Context(), "INSERT INTO payments (reference, idem_key, amount) VALUES ($1, $2, $3) RETURNING id",
		p.Reference, scope.Key, p.Amount).Scan(&id); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	switch r.Header.Get("X-Mode") {
	case "panic":
		panic("handler panics after its first write")
	case "refuse":
		_ = idemserver.NotExecuted(r)
		http.Error(w, "dependency down", http.StatusServiceUnavailable)
		return
	case "slow":
		time.Sleep(40 * time.Millisecond)
	default:
		time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
	}
	if _, err := tx.Exec(r.Context(), "INSERT INTO outbox (payment_id, event) VALUES ($1, 'payment.created')", id); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":%d,"reference":%q,"amount":%d}`, id, p.Reference, p.Amount)
}

// TestStormSameKey sends, for each of 15 keys, 10 concurrent clients spread over three
// servers with their own pools (the same payload, except two clients with another amount),
// each retrying until it has a final answer; handlers panic, refuse after a write, run slow,
// and clients hang up mid-request. The ledger must hold exactly one payment per key, with
// the right amount and one outbox row, every 201 the same, and the other payload never 201.
func TestStormSameKey(t *testing.T) {
	base := testPool(t, 4)
	ctx := context.Background()
	if _, err := base.Exec(ctx, paymentsSchema); err != nil {
		t.Fatal(err)
	}
	var iso, mode string
	if err := base.QueryRow(ctx, "SHOW default_transaction_isolation").Scan(&iso); err != nil {
		t.Fatal(err)
	}
	mode = base.Config().ConnConfig.DefaultQueryExecMode.String()
	t.Logf("isolation %s, exec mode %s", iso, mode)
	var srvs []*httptest.Server
	for range 3 {
		srvs = append(srvs, advServer(t, base, 6, advPay))
	}
	modes := []string{"", "", "slow", "panic", "refuse"}
	const keys, clients = 15, 10
	type result struct {
		status int
		body   string
	}
	var mu sync.Mutex
	finals := map[string][]result{}
	other := map[string][]result{}
	codes := map[int]int{}
	var wg sync.WaitGroup
	for k := range keys {
		key := fmt.Sprintf("00000000-0000-4000-8000-%012d", k)
		for c := range clients {
			wrong := c < 2
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(k), uint64(c)))
				amount := 100 + k
				if wrong {
					amount += 1000
				}
				body := fmt.Sprintf(`{"reference":%q,"amount":%d}`, key, amount)
				for attempt := 0; attempt < 400; attempt++ {
					srv := srvs[rng.IntN(len(srvs))]
					rctx, cancel := context.WithCancel(ctx)
					if rng.IntN(6) == 0 { // the client hangs up mid-request
						time.AfterFunc(time.Duration(rng.IntN(30))*time.Millisecond, cancel)
					}
					req, _ := http.NewRequestWithContext(rctx, "POST", srv.URL+"/v1/payments", strings.NewReader(body))
					req.Header.Set("Authorization", "Bearer acct_storm")
					req.Header.Set("Idempotency-Key", key)
					req.Header.Set("X-Mode", modes[rng.IntN(len(modes))])
					resp, err := srv.Client().Do(req)
					if err != nil {
						cancel()
						continue
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					cancel()
					mu.Lock()
					codes[resp.StatusCode]++
					mu.Unlock()
					switch resp.StatusCode {
					case http.StatusConflict, http.StatusServiceUnavailable, http.StatusInternalServerError:
						if resp.StatusCode == http.StatusInternalServerError {
							mu.Lock()
							t.Errorf("%s: 500 %s", key, b)
							mu.Unlock()
							return
						}
						time.Sleep(time.Duration(2+rng.IntN(10)) * time.Millisecond)
						continue
					}
					mu.Lock()
					if wrong {
						other[key] = append(other[key], result{resp.StatusCode, string(b)})
					} else {
						finals[key] = append(finals[key], result{resp.StatusCode, string(b)})
					}
					mu.Unlock()
					return
				}
				mu.Lock()
				t.Errorf("%s: client %d had no final answer in 400 attempts", key, c)
				mu.Unlock()
			})
		}
	}
	wg.Wait()

	for k := range keys {
		key := fmt.Sprintf("00000000-0000-4000-8000-%012d", k)
		rows, err := base.Query(ctx, `SELECT p.id, p.amount, count(o.id) FROM payments p LEFT JOIN outbox o ON o.payment_id = p.id
			WHERE p.idem_key = $1 GROUP BY p.id`, key)
		if err != nil {
			t.Fatal(err)
		}
		var ids, amounts []int64
		for rows.Next() {
			var id, amount, outbox int64
			if err := rows.Scan(&id, &amount, &outbox); err != nil {
				t.Fatal(err)
			}
			if outbox != 1 {
				t.Errorf("%s: payment %d amount %d with %d outbox rows, want 1", key, id, amount, outbox)
			}
			ids, amounts = append(ids, id), append(amounts, amount)
		}
		if len(ids) != 1 {
			t.Errorf("%s: %d payments %v (amounts %v), want exactly 1", key, len(ids), ids, amounts)
			continue
		}
		// The first payload to run wins the key; the other one must get 422.
		winners, losers := finals[key], other[key]
		if amounts[0] != int64(100+k) {
			winners, losers = losers, winners
		}
		want := fmt.Sprintf(`{"id":%d,"reference":%q,"amount":%d}`, ids[0], key, amounts[0])
		for _, r := range winners {
			if r.status != http.StatusCreated || r.body != want {
				t.Errorf("%s: final answer %d %s, want 201 %s", key, r.status, r.body, want)
			}
		}
		for _, r := range losers {
			if r.status != http.StatusUnprocessableEntity {
				t.Errorf("%s: other payload answered %d %s, want 422", key, r.status, r.body)
			}
		}
	}
	t.Logf("answers by status: %v", codes)
	var processing int
	if err := base.QueryRow(ctx, "SELECT count(*) FROM idem_server_keys WHERE state <> 2").Scan(&processing); err != nil {
		t.Fatal(err)
	}
	if processing != 0 {
		t.Errorf("%d keys left processing", processing)
	}
}

// untilFinal sends with send until an answer other than 409 (in progress) or 503 comes, at
// most tries times, calling wait with the status (0 for a transport error) before each
// resend. It returns "STATUS BODY", or "no answer" when every try was retried.
func untilFinal(tries int, send func(try int) (*http.Response, error), wait func(status int)) string {
	for try := range tries {
		resp, err := send(try)
		if err != nil {
			wait(0)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusServiceUnavailable {
			wait(resp.StatusCode)
			continue
		}
		return fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
	return "no answer"
}
