package idemserver

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
)

// TestReadBody holds readBody to io.ReadAll(http.MaxBytesReader(w, r.Body, limit)), which it
// replaces: the same bytes or the same error, whatever Content-Length says and however the
// body's reader hands out its bytes.
func TestReadBody(t *testing.T) {
	const limit = 600
	errRead := errors.New("connection reset")
	for _, tc := range []struct {
		name string
		size int   // bytes in the body
		cl   int64 // declared Content-Length (-1: unknown)
		wrap func(io.Reader) io.Reader
		fail bool // the reader fails after its bytes
	}{
		{name: "empty", size: 0, cl: 0},
		{name: "small, declared", size: 100, cl: 100},
		{name: "small, unknown length", size: 100, cl: -1},
		{name: "larger than the first buffer, unknown length", size: 599, cl: -1},
		{name: "exactly the limit", size: limit, cl: limit},
		{name: "exactly the limit, unknown length", size: limit, cl: -1},
		{name: "one byte over", size: limit + 1, cl: limit + 1},
		{name: "one byte over, declared short", size: limit + 1, cl: 10},
		{name: "far over, unknown length", size: 5 * limit, cl: -1},
		{name: "declared longer than sent", size: 50, cl: 400},
		{name: "declared shorter than sent", size: 300, cl: 20},
		{name: "one byte at a time", size: 300, cl: 300, wrap: iotest.OneByteReader},
		{name: "EOF with the data", size: 300, cl: -1, wrap: iotest.DataErrReader},
		{name: "half reads, over", size: 2 * limit, cl: -1, wrap: iotest.HalfReader},
		{name: "read error", size: 200, cl: 200, fail: true},
		{name: "read error, one byte at a time", size: 200, cl: -1, fail: true, wrap: iotest.OneByteReader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := bytes.Repeat([]byte("0123456789abcdef"), tc.size/16+1)[:tc.size]
			request := func() *http.Request {
				var rd io.Reader = bytes.NewReader(body)
				if tc.fail {
					rd = io.MultiReader(rd, iotest.ErrReader(errRead))
				}
				if tc.wrap != nil {
					rd = tc.wrap(rd)
				}
				r := httptest.NewRequest(http.MethodPost, "/", nil)
				r.Body, r.ContentLength = io.NopCloser(rd), tc.cl
				return r
			}
			want, wantErr := io.ReadAll(http.MaxBytesReader(httptest.NewRecorder(), request().Body, limit))
			got, err := readBody(httptest.NewRecorder(), request(), limit)
			if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
				t.Fatalf("error %v, want %v", err, wantErr)
			}
			var tooBig *http.MaxBytesError
			if errors.As(wantErr, &tooBig) != errors.As(err, &tooBig) {
				t.Fatalf("error %T, want %T", err, wantErr)
			}
			if err == nil && !bytes.Equal(got, want) {
				t.Fatalf("read %d bytes, want %d", len(got), len(want))
			}
		})
	}
	for _, b := range []io.ReadCloser{nil, http.NoBody} {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Body = b
		if got, err := readBody(httptest.NewRecorder(), r, limit); err != nil || got == nil || len(got) != 0 {
			t.Fatalf("body %v: %q %v, want an empty body", b, got, err)
		}
	}
}

// TestBodyTooLarge sends a body over Config.MaxBodyBytes through a real server: 413
// ProblemBodyTooLarge with the connection closed after it (as http.MaxBytesReader makes
// net/http do), the handler not run and the key left unclaimed, so that the same key with a
// body within the limit runs once.
func TestBodyTooLarge(t *testing.T) {
	runs := 0
	mw, err := New(Config{Backend: NewMemory(), MaxBodyBytes: 64,
		Tenant: func(*http.Request) (string, error) { return "acct_1", nil }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()
	post := func(body string, chunked bool) *http.Response {
		var rd io.Reader = strings.NewReader(body)
		if chunked {
			rd = io.MultiReader(rd) // hides the length: sent chunked, ContentLength -1 on the server
		}
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/payments", rd)
		req.Header.Set("Idempotency-Key", "k-413")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for _, chunked := range []bool{false, true} {
		resp := post(strings.Repeat("x", 65), chunked)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
			t.Fatalf("chunked %v: status %d, connection closed %v; want 413 and a closed connection", chunked, resp.StatusCode, resp.Close)
		}
	}
	if resp := post(strings.Repeat("x", 64), false); resp.StatusCode != http.StatusCreated || runs != 1 {
		t.Fatalf("within the limit: status %d, %d runs; want 201 and 1", resp.StatusCode, runs)
	}
}
