package pgstore

import (
	"errors"
	"testing"

	"github.com/idemkit/idem/keystore"
)

// Cursors round-trip whatever bytes keys and tenants hold; anything else is ErrInvalid.
func TestCursor(t *testing.T) {
	for _, tc := range []struct {
		created     int64
		key, tenant string
	}{{0, "", ""}, {-5, "k:1", "t:2"}, {1 << 62, "é\\x01", ""}, {7, "", "tenant"}} {
		c := makeCursor(tc.created, []byte(tc.key), []byte(tc.tenant))
		created, key, tenant, err := parseCursor(c)
		if err != nil || created != tc.created || string(key) != tc.key || string(tenant) != tc.tenant {
			t.Fatalf("cursor %q: %d %q %q %v", c, created, key, tenant, err)
		}
	}
	for _, bad := range []keystore.Cursor{"x", "1:", "1:x:k", "1:5:ab", "1:+1:ab", "01:1:ab", "1:-1:ab", "a:1:b"} {
		if _, _, _, err := parseCursor(bad); !errors.Is(err, keystore.ErrInvalid) {
			t.Errorf("cursor %q: %v, want ErrInvalid", bad, err)
		}
	}
}

func FuzzCursor(f *testing.F) {
	f.Add("1:1:ab")
	f.Add("0:0:")
	f.Fuzz(func(t *testing.T, s string) {
		created, key, tenant, err := parseCursor(keystore.Cursor(s))
		if s != "" && err == nil && makeCursor(created, key, tenant) != keystore.Cursor(s) { // "" is the start
			t.Fatalf("%q parsed but does not round-trip", s)
		}
	})
}
