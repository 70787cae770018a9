package pgserver

import (
	"net/http"
	"testing"
)

// Header bytes that are not UTF-8 (HTTP allows them in a value) come back byte for byte;
// a text header keeps the plain JSON form rows were always written in.
func TestHeaderEncodingKeepsBytes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		h     http.Header
		plain string // the stored form when it is plain JSON
	}{
		{"text", http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/ch_1"}},
			`{"Content-Type":["application/json"],"Location":["/v1/payments/ch_1"]}`},
		{"latin-1 value", http.Header{"Location": {"/v1/files/caf\xe9"}, "Content-Type": {"text/plain"}}, ""},
		{"bytes in a name", http.Header{"X-\xff": {"1", "2"}}, ""},
		{"empty", http.Header{}, `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := encodeHeader(tc.h)
			if err != nil {
				t.Fatal(err)
			}
			if tc.plain != "" && string(data) != tc.plain {
				t.Errorf("stored %s, want %s", data, tc.plain)
			}
			got, err := decodeHeader(data)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.h) {
				t.Fatalf("decoded %q, want %q", got, tc.h)
			}
			for k, vs := range tc.h {
				if len(got[k]) != len(vs) {
					t.Fatalf("%q: decoded %q, want %q", k, got[k], vs)
				}
				for i := range vs {
					if got[k][i] != vs[i] {
						t.Errorf("%q[%d]: decoded %q, want %q", k, i, got[k][i], vs[i])
					}
				}
			}
		})
	}
	// A row written before this encoding existed, and one holding null.
	for _, stored := range []string{`{"Location":["/x"]}`, `null`} {
		if h, err := decodeHeader([]byte(stored)); err != nil || h == nil {
			t.Errorf("decode %s: %v %v", stored, h, err)
		}
	}
}
