package idemserver_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
)

func TestNewRefusesBadConfig(t *testing.T) {
	tenant := func(*http.Request) (string, error) { return "t", nil }
	mem := idemserver.NewMemory()
	for _, tc := range []struct {
		name string
		cfg  idemserver.Config
		want string
	}{
		{"no backend", idemserver.Config{Tenant: tenant}, "Backend"},
		{"no tenant", idemserver.Config{Backend: mem}, "Tenant"},
		{"negative retention", idemserver.Config{Backend: mem, Tenant: tenant, Retention: -time.Second}, "Retention"},
		{"negative wait", idemserver.Config{Backend: mem, Tenant: tenant, Wait: -1}, "Wait"},
		{"negative body", idemserver.Config{Backend: mem, Tenant: tenant, MaxBodyBytes: -1}, "MaxBodyBytes"},
		{"credential stored", idemserver.Config{Backend: mem, Tenant: tenant, StoredHeaders: []string{"content-type", "set-cookie"}}, "Set-Cookie"},
		{"authorization stored", idemserver.Config{Backend: mem, Tenant: tenant, StoredHeaders: []string{"Authorization"}}, "Authorization"},
	} {
		_, err := idemserver.New(tc.cfg)
		if !errors.Is(err, idemserver.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig naming %s", tc.name, err, tc.want)
		}
	}
}

func TestParseKey(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"abc-123", "abc-123"},
		{`"abc 123"`, "abc 123"},
		{`"a\"b\\c"`, `a"b\c`},
		{" \tk\t ", "k"},
		{strings.Repeat("x", 255), strings.Repeat("x", 255)},
	} {
		if got, err := idemserver.ParseKey(tc.in); err != nil || got != tc.want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", `""`, `"open`, `"a"b`, `"\n"`, `"\x"`, "a b", `a"b`, "é", strings.Repeat("x", 256),
		`"` + strings.Repeat("x", 256) + `"`} {
		if _, err := idemserver.ParseKey(bad); !errors.Is(err, idemserver.ErrInvalidKey) {
			t.Errorf("ParseKey(%q) = %v, want ErrInvalidKey", bad, err)
		}
	}
}
