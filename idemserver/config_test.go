package idemserver_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
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

func TestPurgeEvery(t *testing.T) {
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mem := idemserver.NewMemory()
	mw, err := idemserver.New(idemserver.Config{Backend: mem, Tenant: func(*http.Request) (string, error) { return "t", nil },
		Now: func() time.Time { return clock }, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	for _, k := range []string{"a", "b", "c"} {
		req := httptest.NewRequest(http.MethodPost, "/pay", nil)
		req.Header.Set("Idempotency-Key", k)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	clock = clock.Add(time.Hour) // before PurgeEvery starts: no race on clock
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mw.PurgeEvery(ctx, time.Millisecond, 2, nil) }()
	for give := time.Now().Add(10 * time.Second); mw.Stats().Purged < 3; runtime.Gosched() {
		if time.Now().After(give) {
			t.Fatalf("PurgeEvery purged %d of 3 in 10 s", mw.Stats().Purged)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("PurgeEvery = %v", err)
	}
	if n := mem.Len(); n != 0 || mw.Stats().Purged != 3 {
		t.Fatalf("records left %d, purged %d", n, mw.Stats().Purged)
	}
	if err := mw.PurgeEvery(ctx, 0, 1, nil); !errors.Is(err, idemserver.ErrInvalidConfig) {
		t.Fatalf("PurgeEvery(0) = %v", err)
	}
}
