package idemserver_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/servertest"
)

// OnEvent is called while the request holds its key's claim (EventExpiredReuse,
// EventTakeover): a panic in it unwound past the claim, which was never released, and the key
// answered 409 for good (with pgserver, a pool connection and the key's lock were held too;
// adversarial run). The panic is recovered and counted; the request runs, and the key
// replays its answer.
func TestPanickingHookLeavesNoClaim(t *testing.T) {
	clock := servertest.NewClock()
	mw, err := idemserver.New(idemserver.Config{Backend: idemserver.NewMemory(),
		Tenant: func(*http.Request) (string, error) { return "acct_1", nil },
		Now:    clock.Now, Retention: time.Hour,
		OnEvent: func(e idemserver.Event) {
			if e.Kind == idemserver.EventExpiredReuse {
				panic("metrics bug")
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	var execs atomic.Int64
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		execs.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	post := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":1}`))
		req.Header.Set("Idempotency-Key", "k-hook")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := post(); rec.Code != http.StatusCreated {
		t.Fatalf("first: %d", rec.Code)
	}
	clock.Advance(2 * time.Hour) // the stored answer expired: the next request runs again
	if rec := post(); rec.Code != http.StatusCreated {
		t.Fatalf("after expiry: %d %s", rec.Code, rec.Body)
	}
	if rec := post(); rec.Code != http.StatusCreated || rec.Header().Get(idemserver.ReplayedHeader) != "true" {
		t.Fatalf("replay: %d replayed=%q %s", rec.Code, rec.Header().Get(idemserver.ReplayedHeader), rec.Body)
	}
	if n, p := execs.Load(), mw.Stats().HookPanics; n != 2 || p != 1 {
		t.Fatalf("executed %d times (want 2), hook panics %d (want 1)", n, p)
	}
}
