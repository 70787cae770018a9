package keystore_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/idemkit/idem/keystore"
)

func TestKeyRing(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 16)
	for _, bad := range []struct {
		name    string
		current string
		keys    map[string][]byte
	}{
		{"current missing", "k3", map[string][]byte{"k1": k1}},
		{"short key", "k1", map[string][]byte{"k1": k1[:10]}},
		{"id with a slash", "a/b", map[string][]byte{"a/b": k1}},
		{"empty id", "", map[string][]byte{"": k1}},
	} {
		if _, err := keystore.NewKeyRing(bad.current, bad.keys); !errors.Is(err, keystore.ErrInvalid) {
			t.Errorf("%s: NewKeyRing = %v, want ErrInvalid", bad.name, err)
		}
	}
	old, err := keystore.NewKeyRing("k1", map[string][]byte{"k1": k1})
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := keystore.NewKeyRing("k2", map[string][]byte{"k1": k1, "k2": k2})
	if err != nil {
		t.Fatal(err)
	}
	ad := []byte("scope/key/request")
	sealed, err := old.Seal([]byte("card 4242"), ad)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("4242")) {
		t.Fatal("plaintext in the sealed body")
	}
	if id, err := keystore.SealedKeyID(sealed); err != nil || id != "k1" {
		t.Fatalf("SealedKeyID = %q, %v", id, err)
	}
	if got, err := rotated.Open(sealed, ad); err != nil || string(got) != "card 4242" {
		t.Fatalf("rotated ring opens the old key's body: %q, %v", got, err)
	}
	again, _ := rotated.Seal([]byte("card 4242"), ad)
	if id, _ := keystore.SealedKeyID(again); id != "k2" {
		t.Fatalf("rotated ring seals with %q", id)
	}
	if _, err := old.Open(again, ad); !errors.Is(err, keystore.ErrKeyUnknown) {
		t.Fatalf("old ring on a k2 body: %v, want ErrKeyUnknown", err)
	}
	var none *keystore.KeyRing
	if _, err := none.Open(sealed, ad); !errors.Is(err, keystore.ErrKeyUnknown) {
		t.Fatalf("nil ring: %v, want ErrKeyUnknown", err)
	}
	wrong, _ := keystore.NewKeyRing("k1", map[string][]byte{"k1": bytes.Repeat([]byte{9}, 32)})
	if _, err := wrong.Open(sealed, ad); !errors.Is(err, keystore.ErrKeyWrong) {
		t.Fatalf("another key under k1: %v, want ErrKeyWrong", err)
	}
	if _, err := old.Open(sealed, []byte("scope/key/response")); !errors.Is(err, keystore.ErrKeyWrong) {
		t.Fatalf("moved to the response: %v, want ErrKeyWrong", err)
	}
	if _, err := old.Open([]byte("plain"), ad); !errors.Is(err, keystore.ErrInvalid) {
		t.Fatalf("not sealed: %v, want ErrInvalid", err)
	}
}
