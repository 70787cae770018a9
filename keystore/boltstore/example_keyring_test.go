package boltstore_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// A keystore file whose request and response bodies are sealed (AES-GCM) with a key ring:
// the current key seals, the older one still opens what it sealed (docs/KEYSTORE.md).
func ExampleOptions_keyRing() {
	dir, err := os.MkdirTemp("", "idem-keyring")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "idem.db")
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32) // from a secret manager

	err = openSealed(path, oldKey, newKey)
	fmt.Println(err)
	// Output: <nil>
}

func openSealed(path string, oldKey, newKey []byte) error {
	ring, err := keystore.NewKeyRing("2026-12", map[string][]byte{
		"2026-06": oldKey, // still opens the records written before the rotation
		"2026-12": newKey, // seals every record written from now on
	})
	if err != nil {
		return err
	}
	store, err := boltstore.Open(path, &boltstore.Options{KeyRing: ring})
	if err != nil {
		return err
	}
	return store.Close()
}
