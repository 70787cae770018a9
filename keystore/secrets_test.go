package keystore

import (
	"net/http"
	"testing"
)

func TestStripSecrets(t *testing.T) {
	h := http.Header{
		"Authorization":       {"Bearer a"},
		"authorization":       {"Bearer b"}, // not canonical: assigned directly
		"COOKIE":              {"s=1"},
		"Proxy-Authorization": {"Basic c"},
		"X-Api-Key":           {"k"},
		"x-api-key":           {"k2"},
		"Content-Type":        {"application/json"},
	}
	got := StripSecrets(h, "X-API-KEY")
	if len(got) != 1 || got.Get("Content-Type") != "application/json" {
		t.Fatalf("StripSecrets = %v, want only Content-Type", got)
	}
	if len(h) != 7 {
		t.Fatalf("StripSecrets modified its argument: %v", h)
	}
	if StripSecrets(nil) != nil {
		t.Fatal("StripSecrets(nil) != nil")
	}
}
