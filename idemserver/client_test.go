package idemserver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/outcome"
)

// TestIdemClient: idem's client against the middleware. The first answer is stored and the
// connection is then cut before the client reads it: the client's status check (KeyStatusURL on
// KeyStatusHandler) returns the stored answer and nothing executes twice. A second client reusing
// the key with another body gets the 422 as ErrKeyConflict.
func TestIdemClient(t *testing.T) {
	mw, err := idemserver.New(idemserver.Config{Backend: idemserver.NewMemory(), Tenant: func(r *http.Request) (string, error) {
		if r.Header.Get("Authorization") != "Bearer sk_1" {
			return "", errors.New("unauthenticated")
		}
		return "acct_1", nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	var execs, posts atomic.Int64
	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := execs.Add(1)
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"ch_%d","request":%s}`, n, body)
	})
	mux := http.NewServeMux()
	mux.Handle("POST /v1/payments", mw.Handler(pay))
	mux.Handle("GET /v1/payments/operations/{key}", mw.KeyStatusHandler("POST /v1/payments", nil))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && posts.Add(1) == 1 {
			w = &cutAfterStore{ResponseWriter: w} // the answer is stored, the client never gets it
		}
		mux.ServeHTTP(w, r)
	}))
	defer srv.Close()

	newClient := func() *idem.Client {
		c, err := idem.NewClient(idem.Config{BaseURL: srv.URL, KeyStatusURL: "/v1/payments/operations/{key}",
			Credentials: func(r *http.Request) error { r.Header.Set("Authorization", "Bearer sk_1"); return nil },
			Sleep:       func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx := context.Background()
	op := idem.NewOperation(http.MethodPost, "/v1/payments", []byte(`{"amount":1999}`), idem.WithKey("order-1"),
		idem.WithHeader(http.Header{"Content-Type": {"application/json"}}))
	res, err := newClient().Do(ctx, op)
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if res.StatusCode != 201 || string(res.Body) != `{"id":"ch_1","request":{"amount":1999}}` || res.Source != outcome.SourceKeyStatus || res.Attempts != 1 {
		t.Fatalf("result %d %s source %s attempts %d", res.StatusCode, res.Body, res.Source, res.Attempts)
	}
	other := idem.NewOperation(http.MethodPost, "/v1/payments", []byte(`{"amount":2000}`), idem.WithKey("order-1"))
	if _, err := newClient().Do(ctx, other); !errors.Is(err, idem.ErrKeyConflict) {
		t.Fatalf("reused key with another body: %v, want ErrKeyConflict", err)
	}
	if n := execs.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
	if st := mw.Stats(); st.Executed != 1 || st.PayloadConflicts != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// cutAfterStore drops the connection when the middleware starts writing the stored answer.
type cutAfterStore struct{ http.ResponseWriter }

func (c *cutAfterStore) WriteHeader(int) { panic(http.ErrAbortHandler) }
