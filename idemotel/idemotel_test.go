package idemotel_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

// server scripts one answer per path:
//
//	/flaky     503 (Retry-After: 1) to the first request, then 201
//	/conflict  422: the key was used with another payload
//	/replay    201 marked Idempotent-Replayed: true
//	/unknown   502; the status endpoint says the key completed with 201
//	/down      503 (Retry-After: 0) to everything
//	/stored    a replayed 500: the server stored it for the key
func server(t *testing.T) *httptest.Server {
	var flaky atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /flaky", func(w http.ResponseWriter, r *http.Request) {
		if flaky.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"pay_1"}`))
	})
	mux.HandleFunc("POST /conflict", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = w.Write([]byte(`{"error":"idempotency_key_reused"}`))
	})
	mux.HandleFunc("POST /stored", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(http.StatusInternalServerError)
	})
	mux.HandleFunc("POST /replay", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"pay_0"}`))
	})
	mux.HandleFunc("POST /unknown", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
	})
	mux.HandleFunc("GET /status/{key}", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"status":"completed","response_status":201,"response_body":{"id":"pay_2"}}`))
	})
	mux.HandleFunc("POST /down", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func noSleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// collect reads every idem.* metric once: counters must be cumulative monotonic sums, the
// budget a gauge; units are returned alongside.
func collect(t *testing.T, r *sdkmetric.ManualReader) (values map[string]int64, units map[string]string) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	values, units = map[string]int64{}, map[string]string{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			units[m.Name] = m.Unit
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if !d.IsMonotonic || d.Temporality != metricdata.CumulativeTemporality {
					t.Errorf("%s: monotonic=%v temporality=%v, want a cumulative counter", m.Name, d.IsMonotonic, d.Temporality)
				}
				if len(d.DataPoints) != 1 {
					t.Fatalf("%s: %d data points, want 1", m.Name, len(d.DataPoints))
				}
				values[m.Name] = d.DataPoints[0].Value
			case metricdata.Gauge[int64]:
				if len(d.DataPoints) != 1 {
					t.Fatalf("%s: %d data points, want 1", m.Name, len(d.DataPoints))
				}
				values[m.Name] = d.DataPoints[0].Value
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return values, units
}

func TestRegisterExportsStats(t *testing.T) {
	srv := server(t)
	c, err := idem.NewClient(idem.Config{BaseURL: srv.URL, Store: keystore.NewMemory(), Sleep: noSleep})
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	reg, err := idemotel.Register(provider.Meter("idemotel-test"), c)
	if err != nil {
		t.Fatal(err)
	}

	// Before any call every counter is exported at zero and the budget is full.
	before, _ := collect(t, reader)
	for name, v := range before {
		want := int64(0)
		if name == "idem.retry_budget.available" {
			want = 500 // the retry budget's default capacity
		}
		if v != want {
			t.Errorf("before any call: %s = %d, want %d", name, v, want)
		}
	}

	ctx := context.Background()
	body := []byte(`{"amount":1000,"currency":"eur"}`)
	do := func(path string, opts ...idem.CallOption) (*idem.Result, error) {
		return c.Do(ctx, idem.NewOperation(http.MethodPost, path, body), opts...)
	}
	// 503 then 201: one retry (5 budget tokens, refunded by the success), one throttled wait.
	if res, err := do("/flaky"); err != nil || res.Attempts != 2 {
		t.Fatalf("/flaky: %+v, %v", res, err)
	}
	// 422: a key conflict, a final failure.
	if _, err := do("/conflict"); !errors.Is(err, idem.ErrKeyConflict) {
		t.Fatalf("/conflict: %v, want ErrKeyConflict", err)
	}
	// A replayed 201: a success and a replay.
	if res, err := do("/replay"); err != nil || res.Source != outcome.SourceReplay {
		t.Fatalf("/replay: %+v, %v", res, err)
	}
	// 502 resolved by the status endpoint: an unknown outcome, a status check, resolved.
	if res, err := do("/unknown", idem.CallKeyStatusURL("/status/{key}")); err != nil || res.Source != outcome.SourceKeyStatus {
		t.Fatalf("/unknown: %+v, %v", res, err)
	}
	// Down, two attempts allowed: one retry whose 5 tokens are not refunded.
	if _, err := do("/down", idem.CallMaxAttempts(2)); !errors.Is(err, idem.ErrExhausted) {
		t.Fatalf("/down: %v, want ErrExhausted", err)
	}

	// A stored 500: outcome unknown, manual; then settled through Resolve.
	_, err = do("/stored")
	var oe *idem.OperationError
	if !errors.Is(err, idem.ErrStoredServerError) || !errors.As(err, &oe) {
		t.Fatalf("/stored: %v, want ErrStoredServerError", err)
	}
	if _, err := c.Resolve(ctx, "", oe.Key, idem.Resolution{Verdict: idem.VerdictNotExecuted}); err != nil {
		t.Fatal(err)
	}

	got, units := collect(t, reader)
	want := map[string]int64{
		"idem.calls":                  6,
		"idem.succeeded":              3, // flaky, replay, unknown
		"idem.failed":                 1, // conflict
		"idem.attempts":               8, // 2 + 1 + 1 + 1 + 2 + 1
		"idem.retries":                2, // flaky, down
		"idem.status_checks":          1,
		"idem.replays":                1,
		"idem.key_conflicts":          1,
		"idem.same_key_concurrency":   0,
		"idem.key_expired":            0,
		"idem.in_progress":            0,
		"idem.in_progress_timeouts":   0,
		"idem.unknown_outcomes":       1,
		"idem.unknown_resolved":       1,
		"idem.still_unknown":          0, // /down was not executed (503): exhausted, not unknown
		"idem.final_failures":         3, // conflict, down (gave up exhausted), stored
		"idem.budget_denied":          0,
		"idem.throttled_waits":        1, // Retry-After: 1 on /flaky; Retry-After: 0 is below the backoff
		"idem.recovered":              0,
		"idem.stored_server_errors":   1,
		"idem.lookups":                0,
		"idem.resolved_by_lookup":     0,
		"idem.resolved_by_caller":     1,
		"idem.damaged_records":        0,
		"idem.claims_lost":            0,
		"idem.orphans_reclaimed":      0,
		"idem.lease_waits":            0,
		"idem.clock_skew_refusals":    0,
		"idem.retry_budget.available": 500 - 5, // default capacity less one retry
	}
	if !maps.Equal(got, want) {
		for _, name := range slices.Sorted(maps.Keys(want)) {
			if got[name] != want[name] {
				t.Errorf("%s = %d, want %d", name, got[name], want[name])
			}
		}
		for name := range got {
			if _, ok := want[name]; !ok {
				t.Errorf("unexpected metric %s = %d", name, got[name])
			}
		}
	}
	// The exported values are the client's own counters.
	s := c.Stats()
	if got["idem.attempts"] != s.Attempts || got["idem.retries"] != s.Retries || got["idem.succeeded"] != s.Succeeded {
		t.Errorf("exported %v, Stats %+v", got, s)
	}
	for name, unit := range map[string]string{
		"idem.attempts": "{request}", "idem.retries": "{retry}", "idem.succeeded": "{call}",
		"idem.retry_budget.available": "{token}",
	} {
		if units[name] != unit {
			t.Errorf("%s unit %q, want %q", name, units[name], unit)
		}
	}

	// After Unregister nothing more is observed.
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if _, err := do("/replay"); err != nil {
		t.Fatal(err)
	}
	if after, _ := collect(t, reader); len(after) != 0 {
		t.Errorf("after Unregister: %v, want no values", after)
	}
}

func TestRegisterWithoutBudget(t *testing.T) {
	srv := server(t)
	c, err := idem.NewClient(idem.Config{BaseURL: srv.URL, Budget: idem.BudgetConfig{Disabled: true}, Sleep: noSleep})
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	if _, err := idemotel.Register(provider.Meter("idemotel-test"), c); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do(context.Background(), idem.NewOperation(http.MethodPost, "/flaky", nil)); err != nil {
		t.Fatal(err)
	}
	got, _ := collect(t, reader)
	if _, ok := got["idem.retry_budget.available"]; ok {
		t.Errorf("budget gauge exported for a client without a budget")
	}
	if got["idem.attempts"] != 2 || got["idem.retries"] != 1 || got["idem.succeeded"] != 1 {
		t.Errorf("got %v, want 2 attempts, 1 retry, 1 success", got)
	}
}

func TestRegisterRejectsNil(t *testing.T) {
	c, err := idem.NewClient(idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idemotel.Register(nil, c); err == nil {
		t.Error("nil meter: no error")
	}
	provider := sdkmetric.NewMeterProvider()
	if _, err := idemotel.Register(provider.Meter("x"), nil); err == nil {
		t.Error("nil client: no error")
	}
}
