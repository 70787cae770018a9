package keystore

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

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
			got := newMemRecord(rec, new([]byte)).export(scopedName{"", "k"})
			require.Equal(t, tc.want, got.Request.Header)
			require.Equal(t, tc.want, got.Response.Header)
			wantBody := tc.body
			if len(wantBody) == 0 {
				wantBody = nil
			}
			require.Equal(t, wantBody, got.Request.Body)
			require.Equal(t, wantBody, got.Response.Body)
			require.Equal(t, 201, got.Response.StatusCode)
		})
	}
}

func TestMemoryPackResponseSecrets(t *testing.T) {
	rec := &Record{Key: "k", State: StateSucceeded, Request: Request{Method: "POST", URL: "/"},
		Response: &Response{StatusCode: 200, Header: http.Header{"Set-Cookie": {"s=1"}, "set-cookie": {"t=2"},
			"Content-Type": {"text/plain"}}}}
	got := newMemRecord(rec, new([]byte)).export(scopedName{"", "k"})
	require.Equal(t, http.Header{"Content-Type": {"text/plain"}}, got.Response.Header)
}

// Every field a caller stores reads back as it was, whether held as a field or packed.
func TestMemoryRecordRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 123, time.FixedZone("X", 3600))
	full := &Record{Scope: "acme", Key: "k1", Intent: "order-1",
		Fingerprint: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		Request:     Request{Method: "POST", URL: "https://api.example/v1/p?x=1", Header: http.Header{"A": {"1"}}, Body: []byte("{}")},
		State:       StateManual, Attempts: 3, LastStatusCode: 500, Reason: "stored_5xx", NotExecuted: true,
		Error: "idem: outcome unknown", Response: &Response{StatusCode: 500, Header: http.Header{"B": {"2"}}, Body: []byte("oops")},
		CreatedAt: at, UpdatedAt: time.Now(), Owner: "node-1", LeaseUntil: at.Add(time.Minute), Fence: 7,
		Note: "settled by lookup: pay_1"}
	cases := map[string]func(*Record){
		"every field":               func(*Record) {},
		"no response":               func(r *Record) { r.Response = nil },
		"negative numbers":          func(r *Record) { r.Attempts, r.LastStatusCode, r.Fence = -1, -2, -3 },
		"uppercase hex fingerprint": func(r *Record) { r.Fingerprint = strings.ToUpper(r.Fingerprint) },
		"short fingerprint":         func(r *Record) { r.Fingerprint = "abc" },
		"empty fingerprint":         func(r *Record) { r.Fingerprint = "" },
		"non-hex 64 characters":     func(r *Record) { r.Fingerprint = strings.Repeat("g", 64) },
		"zero times, no lease": func(r *Record) {
			r.CreatedAt, r.UpdatedAt, r.Owner, r.LeaseUntil = time.Time{}, time.Time{}, "", time.Time{}
		},
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			rec := full.Clone()
			change(rec)
			mr := newMemRecord(rec, new([]byte))
			require.Equal(t, rec, mr.export(scopedName{rec.Scope, rec.Key}))
			require.Equal(t, rec.Fingerprint, mr.fingerprintFor(rec.Fingerprint))
			require.Equal(t, rec.Fingerprint, mr.fingerprintFor(rec.Fingerprint+"0"))
			require.Equal(t, rec.Fingerprint, mr.fingerprintFor(""))
		})
	}
}

// A fingerprint as Fingerprint makes it is packed in its 32 bytes, and comparing it with the
// one an Update carries allocates nothing.
func TestMemoryFingerprintPacking(t *testing.T) {
	fp := "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	require.Len(t, appendFingerprint(nil, fp), 33)
	require.Len(t, appendFingerprint(nil, strings.ToUpper(fp)), 1+1+64)
	mr := newMemRecord(&Record{Key: "k", Fingerprint: fp, State: StatePending, Request: Request{Method: "POST"}}, new([]byte))
	other := strings.Replace(fp, "9f", "9e", 1)
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = mr.fingerprintFor(fp) }))
	u := unpacker{b: append(appendFingerprint(nil, fp), 7)}
	require.True(t, u.sameFingerprint(fp))
	require.Equal(t, uint64(7), u.uvarint(), "the fingerprint is read past")
	require.Equal(t, fp, mr.fingerprintFor(other))
}

// A common word packs into one byte and reads back as itself; any other string, including
// one that differs from a common word in case, is kept whole.
func TestMemoryWords(t *testing.T) {
	for i, w := range commonWords {
		require.Equal(t, uint64(i), commonWordIndex[w], "commonWords holds %q twice", w)
	}
	for _, w := range []string{"Content-Type", "application/json", "POST", "content-type", "POSTX", "", "X-Custom"} {
		b := appendWord(nil, w)
		if _, ok := commonWordIndex[w]; ok {
			require.Len(t, b, 1, w)
		} else {
			require.Len(t, b, 1+len(w), w)
		}
		u := unpacker{b: b}
		require.Equal(t, w, u.word())
		require.Empty(t, u.b)
	}
	u := unpacker{b: appendWord(nil, "x")[:1]} // truncated
	require.Equal(t, "", u.word())
}

// The packing buffer is reused, but one huge body does not stay allocated.
func TestMemoryScratchBounded(t *testing.T) {
	var scratch []byte
	newMemRecord(&Record{Key: "k", State: StatePending, Request: Request{Method: "POST", Body: []byte("small")}}, &scratch)
	require.NotZero(t, cap(scratch))
	small := cap(scratch)
	newMemRecord(&Record{Key: "k", State: StatePending, Request: Request{Method: "POST", Body: make([]byte, maxScratch)}}, &scratch)
	require.Equal(t, small, cap(scratch))
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
	f.Add(pack(nil, &Record{Fingerprint: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		Request:  Request{Method: "POST", URL: "/", Header: http.Header{"A": {"1", "2"}, "B": nil}, Body: []byte("xy")},
		Response: &Response{StatusCode: 201, Header: http.Header{"C": {"3"}}, Body: []byte("z")}}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		u := unpacker{b: b}
		_ = u.varint()
		_ = u.header()
		_ = u.body()
		u = unpacker{b: b}
		_ = u.sameFingerprint("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
		for n := range len(b) {
			mr := &memRecord{packed: b[n:]}
			_ = mr.export(scopedName{})
			_ = mr.fingerprintFor("x")
		}
	})
}
