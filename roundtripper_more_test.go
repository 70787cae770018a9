package idem

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemtest"
)

// Which methods become operations: POST and PATCH by default, exactly UnsafeMethods when set.
func TestTransportUnsafeMethods(t *testing.T) {
	tests := []struct {
		unsafe []string
		method string
		want   bool
	}{
		{nil, http.MethodPost, true},
		{nil, http.MethodPatch, true},
		{nil, http.MethodPut, false},
		{nil, http.MethodDelete, false},
		{nil, http.MethodGet, false},
		{[]string{"POST", "PUT"}, http.MethodPut, true},
		{[]string{"POST", "PUT"}, http.MethodPatch, false},
		{[]string{}, http.MethodPost, false},
	}
	for _, tt := range tests {
		tr := &Transport{UnsafeMethods: tt.unsafe}
		assert.Equal(t, tt.want, tr.unsafe(tt.method), "%v %s", tt.unsafe, tt.method)
	}

	// A POST sent as a safe method (UnsafeMethods without POST) carries no key: idemtest
	// refuses it with 400, and nothing is persisted.
	var log keyLog
	e := newEnv(t, idemtest.Config{OnPayment: log.hook}, nil)
	hc := &http.Client{Transport: &Transport{Client: e.c, UnsafeMethods: []string{http.MethodPatch}}}
	resp, err := hc.Post(e.srv.URL+"/v1/payments", "application/json", strings.NewReader(string(paymentBody(1, "r"))))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Equal(t, []string{""}, log.all())
	recs, err := e.store.List(context.Background())
	require.NoError(t, err)
	assert.Empty(t, recs)
}

// parseSFString inverts sfString for every valid key, and never accepts what sfString could
// not have produced from a valid key.
func FuzzParseSFString(f *testing.F) {
	for _, s := range []string{`"abc"`, `"a\"b"`, `"a\\b"`, `""`, `"`, `abc`, `"a\b"`, "\"\x7f\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, ok := parseSFString(s)
		if !ok {
			return
		}
		if ValidateKey(k) == nil && sfString(k) != s {
			t.Fatalf("parseSFString(%q) = %q, which encodes back as %q", s, k, sfString(k))
		}
		if k2, ok := parseSFString(sfString(k)); !ok || k2 != k {
			t.Fatalf("round trip of %q failed: %q %v", k, k2, ok)
		}
	})
}
