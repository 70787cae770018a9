package keystore

import (
	"context"
	"encoding/binary"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// Memory packs headers and bodies into bytes; what a caller reads back must be exactly what
// StoredCopy would have kept, nil and empty value lists apart.
func TestMemoryPackRoundTrip(t *testing.T) {
	cases := []struct {
		name   string
		header http.Header
		body   []byte
		want   http.Header
	}{
		{"no header, no body", nil, nil, nil},
		{"empty header map", http.Header{}, nil, nil},
		{"one value", http.Header{"Content-Type": {"application/json"}}, []byte(`{"a":1}`),
			http.Header{"Content-Type": {"application/json"}}},
		{"several values, nil and empty lists", http.Header{"X-Multi": {"a", "", "c"}, "X-Nil": nil, "X-Empty": {}},
			[]byte("x"), http.Header{"X-Multi": {"a", "", "c"}, "X-Nil": nil, "X-Empty": {}}},
		{"credentials dropped in any case", http.Header{"Authorization": {"Bearer s"}, "cookie": {"c=1"},
			"Proxy-Authorization": {"p"}, "Request-Id": {"r"}}, nil, http.Header{"Request-Id": {"r"}}},
		{"only credentials", http.Header{"Authorization": {"Bearer s"}}, nil, nil},
		{"empty body reads back nil", nil, []byte{}, nil},
		{"binary body", nil, []byte{0, 0xff, '\n', 0x80}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &Record{Key: "k", State: StateSucceeded,
				Request:  Request{Method: "POST", URL: "/v1/p", Header: tc.header, Body: tc.body},
				Response: &Response{StatusCode: 201, Header: tc.header.Clone(), Body: tc.body}}
			got := newMemRecord(rec).export()
			require.Equal(t, tc.want, got.Request.Header)
			require.Equal(t, tc.want, got.Response.Header)
			wantBody := tc.body
			if len(wantBody) == 0 {
				wantBody = nil
			}
			require.Equal(t, wantBody, got.Request.Body)
			require.Equal(t, wantBody, got.Response.Body)
			require.Equal(t, 201, got.Response.StatusCode)
			// Packing allocates exactly what it writes.
			req := packRequest(&rec.Request)
			require.Equal(t, len(req), cap(req))
			// The packed request equals its own stripped export, and only that.
			mr := newMemRecord(rec)
			require.True(t, sameRequest(mr.req, &got.Request))
			if len(tc.want) != len(tc.header) {
				require.False(t, sameRequest(mr.req, &rec.Request), "a request with credentials is not the stored one")
			}
		})
	}
}

func TestMemoryPackResponseSecrets(t *testing.T) {
	rec := &Record{Key: "k", State: StateSucceeded, Request: Request{Method: "POST", URL: "/"},
		Response: &Response{StatusCode: 200, Header: http.Header{"Set-Cookie": {"s=1"}, "set-cookie": {"t=2"},
			"Content-Type": {"text/plain"}}}}
	got := newMemRecord(rec).export()
	require.Equal(t, http.Header{"Content-Type": {"text/plain"}}, got.Response.Header)
}

// An Update that keeps the request shares the packed bytes; one that changes a header, a
// value or the body packs its own.
func TestMemoryUpdateSharesOnlyTheSameRequest(t *testing.T) {
	base := func() *Record {
		return &Record{Key: "k", State: StatePending,
			Request: Request{Method: "POST", URL: "/v1/p", Header: http.Header{"A": {"1", "2"}, "B": nil}, Body: []byte("body")}}
	}
	old := newMemRecord(base())
	same := old.updated(base())
	require.Same(t, &old.req[0], &same.req[0])

	for name, change := range map[string]func(*Record){
		"value":      func(r *Record) { r.Request.Header["A"][1] = "3" },
		"more":       func(r *Record) { r.Request.Header["A"] = append(r.Request.Header["A"], "3") },
		"nil to set": func(r *Record) { r.Request.Header["B"] = []string{} },
		"name":       func(r *Record) { r.Request.Header["C"] = r.Request.Header["B"]; delete(r.Request.Header, "B") },
		"body":       func(r *Record) { r.Request.Body = []byte("bodz") },
		"url":        func(r *Record) { r.Request.URL = "/v1/q" },
	} {
		rec := base()
		change(rec)
		next := old.updated(rec)
		require.NotSame(t, &old.req[0], &next.req[0], name)
		require.Equal(t, rec.Request.Header, next.export().Request.Header, name)
	}
}

// The stored record never shares memory with the caller, in or out.
func TestMemoryPackIsACopy(t *testing.T) {
	ctx := context.Background()
	m := NewMemory()
	h := http.Header{"A": {"1"}}
	body := []byte("body")
	rec := &Record{Key: "k", State: StatePending, Request: Request{Method: "POST", URL: "/", Header: h, Body: body}}
	require.NoError(t, m.Create(ctx, rec))
	h["A"][0], body[0] = "x", 'x'
	got, err := m.Get(ctx, "", "k")
	require.NoError(t, err)
	require.Equal(t, http.Header{"A": {"1"}}, got.Request.Header)
	require.Equal(t, []byte("body"), got.Request.Body)
	got.Request.Header["A"][0], got.Request.Body[0] = "y", 'y'
	again, err := m.Get(ctx, "", "k")
	require.NoError(t, err)
	require.Equal(t, "1", again.Request.Header.Get("A"))
	require.Equal(t, []byte("body"), again.Request.Body)
}

// Truncated packed bytes (which Memory never makes) read as less, never as a panic.
func FuzzMemoryUnpack(f *testing.F) {
	f.Add(packResponse(&Response{StatusCode: 201, Header: http.Header{"A": {"1", "2"}, "B": nil}, Body: []byte("xy")}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		u := unpacker{b: b}
		_ = u.varint()
		_ = u.header()
		_ = u.body()
		_ = sameRequest(b, &Request{Header: http.Header{"A": {"1"}}})
		for n := range len(b) {
			mr := &memRecord{req: b[:n], resp: b[n:]}
			_ = mr.export()
		}
	})
}

func TestUvarintLen(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 16383, 16384, 1<<63 - 1, 1<<64 - 1} {
		require.Equal(t, len(binary.AppendUvarint(nil, v)), uvarintLen(v), v)
	}
}
