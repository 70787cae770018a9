package keystore

import (
	"net/http"
	"testing"
)

func TestCheckHeaderText(t *testing.T) {
	for _, tc := range []struct {
		h    http.Header
		want string
	}{
		{http.Header{"X-Trace": {"café"}}, ""},
		{http.Header{"X-Trace": {"caf\xe9"}}, "request header X-Trace: value is not valid UTF-8"},
		{http.Header{"X-\xff": {"v"}}, `request header name "X-\xff" is not valid UTF-8`},
		{nil, ""},
	} {
		err := CheckHeaderText("request", tc.h)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("CheckHeaderText(%q) = %q, want %q", tc.h, got, tc.want)
		}
	}
}
