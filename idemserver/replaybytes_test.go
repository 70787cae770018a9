package idemserver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// advAnswer is one handler answer for TestReplayByteForByte.
type advAnswer struct {
	status int
	header http.Header // set as given (several values, empty values, nil slices)
	body   []byte      // nil: the handler writes nothing
}

// TestReplayByteForByte runs handlers through the middleware over Memory and replays
// each key: the replay must carry the first answer's status, its stored header fields with
// every value in order (several values, empty values), and its body byte for byte (empty,
// binary, 1 MiB), and payloads that differ only in a number's or a string's spelling get 422
// while the same payload indented or reordered is replayed. It held.
func TestReplayByteForByte(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(r.Uint32())
	}
	answers := []advAnswer{
		{status: 201, header: http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/p/1"}}, body: []byte(`{"id":"p_1"}`)},
		{status: 200, header: http.Header{"Etag": {`"a"`, `"b"`, ""}, "Content-Language": {"", "de"}}, body: []byte{}},
		{status: 204},
		{status: 202, header: http.Header{"Content-Type": {"application/octet-stream"}, "Last-Modified": {""}}, body: big},
		{status: 299, header: http.Header{"Content-Encoding": {"gzip", "br"}, "X-Not-Stored": {"x"}}, body: []byte{0, 0xff, '\r', '\n', 0}},
		{status: 409, body: []byte("conflict\n")},
		{status: 500, header: http.Header{"Content-Type": nil}, body: []byte(strings.Repeat("é", 70000))},
	}
	for i, a := range answers {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			runs := 0
			mw, err := New(Config{Backend: NewMemory(), Tenant: func(*http.Request) (string, error) { return "acct", nil }})
			if err != nil {
				t.Fatal(err)
			}
			h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs++
				for k, vs := range a.header {
					w.Header()[k] = append([]string(nil), vs...)
				}
				w.WriteHeader(a.status)
				if a.body != nil {
					_, _ = w.Write(a.body)
				}
			}))
			do := func(body string) *httptest.ResponseRecorder {
				req := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(body))
				req.Header.Set("Idempotency-Key", "key-1")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				return w
			}
			first := do(`{"amount":1999,"currency":"eur","meta":{"a":"\u0041","b":[1.0,-0,1e2]}}`)
			for _, body := range []string{
				`{"amount":1999,"currency":"eur","meta":{"a":"\u0041","b":[1.0,-0,1e2]}}`,
				`{"meta":{"b":[1.0,-0,1e2],"a":"\u0041"},"currency":"eur","amount":1999}`,
				"{\n  \"amount\": 1999,\n  \"currency\": \"eur\",\n  \"meta\": {\"a\": \"\\u0041\", \"b\": [1.0, -0, 1e2]}\n}",
			} {
				again := do(body)
				if again.Code != first.Code || again.Header().Get(ReplayedHeader) != "true" {
					t.Fatalf("retry %q: status %d replayed %q, want %d replayed", body, again.Code, again.Header().Get(ReplayedHeader), first.Code)
				}
				if !bytes.Equal(again.Body.Bytes(), first.Body.Bytes()) {
					t.Fatalf("retry %q: body of %d bytes differs from the first's %d", body, again.Body.Len(), first.Body.Len())
				}
				for _, k := range DefaultStoredHeaders {
					if got, want := again.Header()[k], first.Header()[k]; !reflect.DeepEqual(got, want) && (len(got) != 0 || len(want) != 0) {
						t.Fatalf("retry: %s %q, the first answer had %q", k, got, want)
					}
				}
			}
			for _, body := range []string{
				`{"amount":1999,"currency":"eur","meta":{"a":"A","b":[1.0,-0,1e2]}}`,
				`{"amount":1999,"currency":"eur","meta":{"a":"\u0041","b":[1,-0,1e2]}}`,
				`{"amount":1999,"currency":"eur","meta":{"a":"\u0041","b":[1.0,0,1e2]}}`,
				`{"amount":1999,"currency":"eur","meta":{"a":"\u0041","b":[1.0,-0,100]}}`,
				`{"amount":1999.0,"currency":"eur","meta":{"a":"\u0041","b":[1.0,-0,1e2]}}`,
				`{"amount":1999,"currency":"EUR","meta":{"a":"\u0041","b":[1.0,-0,1e2]}}`,
				`{"Amount":1999,"currency":"eur","meta":{"a":"\u0041","b":[1.0,-0,1e2]}}`,
				``, `not json`,
			} {
				if w := do(body); w.Code != http.StatusUnprocessableEntity {
					t.Fatalf("another payload %q under the same key: %d, want 422", body, w.Code)
				}
			}
			if runs != 1 {
				t.Fatalf("handler ran %d times", runs)
			}
		})
	}
}

// TestCollidingConcurrent serves many keys at once through the middleware over a
// Memory whose scopes all share one hash, with answers expiring almost at once and a purger
// running alongside: every answer, first or replayed, must be its own key's (a chain walk
// that returned another scope's record would replay another key's body), and once all is
// purged Len is 0 (nothing leaked in a chain). Run it with -race. It held.
func TestCollidingConcurrent(t *testing.T) {
	mem := NewMemoryColliding()
	var clock atomic.Int64
	now := func() time.Time { return time.Unix(1_700_000_000, clock.Add(1)*int64(time.Microsecond)) }
	mw, err := New(Config{Backend: mem, Retention: 600 * time.Microsecond, Now: now,
		Tenant: func(r *http.Request) (string, error) { return r.Header.Get("X-Tenant"), nil }})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "%s|%s|%s", r.Header.Get("X-Tenant"), r.Header.Get("Idempotency-Key"), b)
	}))
	var wg sync.WaitGroup
	var replays atomic.Int64
	errs := make(chan error, 9)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				_, _ = mw.Purge(context.Background(), 3)
			}
		}
	}()
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rr := rand.New(rand.NewPCG(uint64(g), 3))
			for range 1500 {
				tenant, key := fmt.Sprint("t", rr.IntN(2)), fmt.Sprint("k", rr.IntN(40))
				body := fmt.Sprintf(`{"k":%q}`, key)
				req := httptest.NewRequest(http.MethodPost, "/v1/p", strings.NewReader(body))
				req.Header.Set("Idempotency-Key", key)
				req.Header.Set("X-Tenant", tenant)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Header().Get(ReplayedHeader) == "true" {
					replays.Add(1)
				}
				if w.Code == http.StatusConflict {
					continue // in flight on another goroutine
				}
				if want := tenant + "|" + key + "|" + body; w.Code != 200 || w.Body.String() != want {
					errs <- fmt.Errorf("%s %s: %d %q, want 200 %q", tenant, key, w.Code, w.Body.String(), want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if n := replays.Load(); n < 1000 || n > 11000 {
		t.Fatalf("%d of 12000 answers replayed: the test needs both replays and expiries", n)
	}
	clock.Add(int64(time.Hour / time.Microsecond))
	if _, err := mw.Purge(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if n := mem.Len(); n != 0 {
		t.Fatalf("after a full purge Memory holds %d records", n)
	}
}
