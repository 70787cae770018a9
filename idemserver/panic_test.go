package idemserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
)

// cancelKey carries a request's own cancel function to the handler (TestPanicAfterExecutionBeganStoresA500).
type cancelKey struct{}

// wrapMemory is NewMemory whose claims' Complete fails as fail says (nil: never), as a
// backend over a network store fails: a cancelled context, a reset connection.
type wrapMemory struct {
	*idemserver.Memory
	fail func(ctx context.Context) error
}

type wrapClaim struct {
	idemserver.Claim
	fail func(ctx context.Context) error
}

func (m wrapMemory) Claim(ctx context.Context, req idemserver.ClaimRequest) (idemserver.Claim, *idemserver.Record, error) {
	c, r, err := m.Memory.Claim(ctx, req)
	if c != nil {
		c = wrapClaim{c, m.fail}
	}
	return c, r, err
}

func (c wrapClaim) Complete(ctx context.Context, resp *idemserver.Response, now, expires time.Time) error {
	if c.fail != nil {
		if err := c.fail(ctx); err != nil {
			return err
		}
	}
	return c.Claim.Complete(ctx, resp, now, expires)
}

// TestPanicAfterExecutionBeganStoresA500: with a backend that does not roll the handler's
// work back, a handler that panics after execution began never runs again for its key: the
// key replays a 500 ProblemHandlerFailed problem, whatever the client's context, a store
// write that fails twice, or a WriteProblem that writes nothing or panics.
func TestPanicAfterExecutionBeganStoresA500(t *testing.T) {
	var failures atomic.Int32
	for _, tc := range []struct {
		name         string
		cancel       bool // the request's context ends before the handler panics
		fail         func(ctx context.Context) error
		writeProblem func(w http.ResponseWriter, r *http.Request, p idemserver.Problem)
		wantJSON     bool // the 500 is WriteProblemJSON's (else the custom renderer's)
	}{
		{name: "memory", wantJSON: true},
		{name: "client gone before the panic", cancel: true, wantJSON: true, fail: func(ctx context.Context) error {
			return ctx.Err() // a store call ends with its context
		}},
		{name: "store write fails twice", wantJSON: true, fail: func(context.Context) error {
			if failures.Add(1) <= 2 {
				return errors.New("store: connection reset")
			}
			return nil
		}},
		{name: "WriteProblem writes nothing for a 500", wantJSON: true,
			writeProblem: func(w http.ResponseWriter, r *http.Request, p idemserver.Problem) {}},
		{name: "WriteProblem panics on a 500", wantJSON: true,
			writeProblem: func(w http.ResponseWriter, r *http.Request, p idemserver.Problem) { panic("unknown problem") }},
		{name: "WriteProblem renders it", wantJSON: false,
			writeProblem: func(w http.ResponseWriter, r *http.Request, p idemserver.Problem) {
				w.WriteHeader(p.Status)
				_, _ = io.WriteString(w, `{"error":"`+p.Type+`"}`)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int32
			mw, err := idemserver.New(idemserver.Config{Backend: wrapMemory{idemserver.NewMemory(), tc.fail},
				Tenant: func(*http.Request) (string, error) { return "t", nil }, WriteProblem: tc.writeProblem})
			if err != nil {
				t.Fatal(err)
			}
			h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1) // the charge
				if tc.cancel {
					r.Context().Value(cancelKey{}).(context.CancelFunc)() // as when the client goes away
				}
				panic(http.ErrAbortHandler)
			}))
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx, cancel := context.WithCancel(r.Context())
				defer cancel()
				h.ServeHTTP(w, r.WithContext(context.WithValue(ctx, cancelKey{}, cancel)))
			}))
			defer srv.Close()
			post := func() (*http.Response, string, error) {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/payments", strings.NewReader(`{"amount":1}`))
				req.Header.Set("Idempotency-Key", "k-"+strings.ReplaceAll(tc.name, " ", "-"))
				resp, err := srv.Client().Do(req)
				if err != nil {
					return nil, "", err
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp, string(b), nil
			}
			if _, _, err := post(); err == nil {
				t.Fatal("the panicking request got an answer; want the connection dropped")
			}
			for i := 0; i < 2; i++ {
				resp, body, err := post()
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != 500 || resp.Header.Get(idemserver.ReplayedHeader) != "true" {
					t.Fatalf("retry %d: %d %s (replayed %q); want the stored 500", i, resp.StatusCode, body, resp.Header.Get(idemserver.ReplayedHeader))
				}
				var p idemserver.Problem
				if tc.wantJSON {
					if json.Unmarshal([]byte(body), &p) != nil || p.Type != idemserver.ProblemHandlerFailed || p.Status != 500 {
						t.Fatalf("retry %d: body %s; want the ProblemHandlerFailed problem", i, body)
					}
				} else if body != `{"error":"`+idemserver.ProblemHandlerFailed+`"}` {
					t.Fatalf("retry %d: body %s; want the custom rendering", i, body)
				}
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("the handler ran %d times for one key", n)
			}
		})
	}
}

// TestCompleteFailureAfterExecutionIsNot503: a handler that finished but whose answer could
// not be stored (a backend without rollback) did its work: the answer is a 500 saying the
// effect is unknown, not a 503 saying nothing happened, and the key is not freed.
func TestCompleteFailureAfterExecutionIsNot503(t *testing.T) {
	var runs atomic.Int32
	mw, err := idemserver.New(idemserver.Config{Backend: wrapMemory{idemserver.NewMemory(), func(context.Context) error { return errors.New("store down") }},
		Tenant: func(*http.Request) (string, error) { return "t", nil }})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(201)
	}))
	for i := 0; i < 2; i++ {
		req := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":1}`))
		req.Header.Set("Idempotency-Key", "k-down")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		want := 500
		if i == 1 {
			want = 409 // the key is still held: in progress, never run again meanwhile
		}
		if w.Code != want {
			t.Fatalf("request %d: %d %s; want %d", i+1, w.Code, w.Body, want)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times", n)
	}
}

// A handler that writes a status net/http refuses (1000) panics as it would without the
// middleware, after execution began: the key keeps a 500 ProblemHandlerFailed, replayed to
// every retry. The code used to be stored and its replay panicked on every retry.
func TestInvalidStatusCodeStoresA500(t *testing.T) {
	mw, err := idemserver.New(idemserver.Config{Backend: idemserver.NewMemory(),
		Tenant: func(*http.Request) (string, error) { return "acct_1", nil }})
	if err != nil {
		t.Fatal(err)
	}
	var execs atomic.Int64
	srv := httptest.NewUnstartedServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		execs.Add(1)
		w.WriteHeader(1000)
	})))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the first request's panic, expected
	srv.Start()
	defer srv.Close()
	post := func() (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/payments", strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", "k-1000")
		return http.DefaultClient.Do(req)
	}
	if resp, err := post(); err == nil { // net/http drops the connection of a panicking handler
		resp.Body.Close()
		t.Fatalf("first request answered %d, want the connection dropped", resp.StatusCode)
	}
	for i := range 2 {
		resp, err := post()
		if err != nil {
			t.Fatalf("retry %d: %v", i+1, err)
		}
		var p idemserver.Problem
		_ = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if resp.StatusCode != http.StatusInternalServerError || resp.Header.Get(idemserver.ReplayedHeader) != "true" ||
			p.Type != idemserver.ProblemHandlerFailed {
			t.Errorf("retry %d: %d replayed=%q type %q, want a replayed 500 %s", i+1, resp.StatusCode,
				resp.Header.Get(idemserver.ReplayedHeader), p.Type, idemserver.ProblemHandlerFailed)
		}
	}
	if n := execs.Load(); n != 1 {
		t.Errorf("executed %d times, want 1", n)
	}
}
