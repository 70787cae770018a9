package idem

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{
		"", "k", "8e03978e-40d5-43e8-bc93-6894a57f9324", "a b", "a\x00", "\x7f", "\x80", "clé",
		opVisibleASCII(255), opVisibleASCII(256), `"\`, ".", "..", "...",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := ValidateKey(key)
		valid := len(key) >= 1 && len(key) <= maxKeyLength && key != "." && key != ".." // dot segments
		for i := 0; valid && i < len(key); i++ {
			valid = key[i] >= 0x21 && key[i] <= 0x7e
		}
		if err == nil && !valid {
			t.Fatalf("ValidateKey(%q) accepted an invalid key", key)
		}
		if err != nil && valid {
			t.Fatalf("ValidateKey(%q) rejected a valid key: %v", key, err)
		}
		if err != nil && !errors.Is(err, ErrInvalidOperation) {
			t.Fatalf("ValidateKey(%q) error %v does not match ErrInvalidOperation", key, err)
		}
		if err == nil {
			// A valid key always round-trips through the sf-string encoding.
			enc := sfString(key)
			if len(enc) < len(key)+2 || enc[0] != '"' || enc[len(enc)-1] != '"' {
				t.Fatalf("sfString(%q) = %q", key, enc)
			}
			dec := strings.NewReplacer(`\\`, `\`, `\"`, `"`).Replace(enc[1 : len(enc)-1])
			if dec != key {
				t.Fatalf("sfString(%q) = %q decodes to %q", key, enc, dec)
			}
		}
	})
}

// target's shortcut for a normal relative URL must give what the full resolution gives, under
// a base with and without a path.
// FuzzPlainPath holds check's shortcut to url.Parse: a plain path must parse, as a relative
// URL without user info.
func FuzzPlainPath(f *testing.F) {
	for _, ref := range []string{"/v1/payments", "/", "/v1/payments?x=1", "/a?b?", "/a#b", "//a/b", "/%2F/x",
		"/%zz", "/a b", "/a\x7f", "/a:b@c", "/?", "http://h/x", "/\x00"} {
		f.Add(ref)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		if !plainPath(ref) {
			return
		}
		u, err := url.Parse(ref)
		if err != nil || u.IsAbs() || u.User != nil || u.Host != "" {
			t.Fatalf("plain path %q: url.Parse gives %#v, %v", ref, u, err)
		}
	})
}

func FuzzTargetShortcut(f *testing.F) {
	for _, ref := range []string{"/v1/payments", "/", "/v1/payments?x=1", "/a?b?", "/a#b", "//a/b", "/%2F/x",
		"/v1/payments?", "/v1/../x", "/\\x", "/ x", "/a:b", "/?", "/#"} {
		f.Add(ref)
	}
	bases := []string{"https://api.example.com", "https://api.example.com/v2/", "http://127.0.0.1:8080/a/b"}
	clients := make([]*Client, len(bases))
	for i, b := range bases {
		c, err := NewClient(Config{BaseURL: b})
		if err != nil {
			f.Fatal(err)
		}
		clients[i] = c
	}
	f.Fuzz(func(t *testing.T, ref string) {
		if !normalRelative(ref) {
			return
		}
		if _, err := url.Parse(ref); err != nil {
			return // Do refuses it before target runs
		}
		for i, c := range clients {
			if got, want := c.target(ref), c.resolveTarget(ref); got != want {
				t.Fatalf("base %s, ref %q: shortcut %q, resolution %q", bases[i], ref, got, want)
			}
		}
	})
}
