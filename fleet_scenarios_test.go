package idem_test

import (
	"path/filepath"
	"testing"

	"github.com/idemkit/idem/internal/fleettest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// The fleet scenarios on the single-process stores: several Clients (instances, each with
// its own owner id) share one Memory or one bbolt Store.
func fleetStores() map[string]fleettest.Stores {
	return map[string]fleettest.Stores{
		"memory": func(t *testing.T) (keystore.Store, keystore.Store) {
			s := keystore.NewMemory()
			return s, s
		},
		"bolt": func(t *testing.T) (keystore.Store, keystore.Store) {
			s, err := boltstore.Open(filepath.Join(t.TempDir(), "keys.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s, s
		},
	}
}

func TestFleetSameIntentAtOnce(t *testing.T) {
	for name, stores := range fleetStores() {
		t.Run(name, func(t *testing.T) { fleettest.SameIntentAtOnce(t, stores) })
	}
}

func TestFleetStaleOwnerWakes(t *testing.T) {
	for name, stores := range fleetStores() {
		t.Run(name, func(t *testing.T) { fleettest.StaleOwnerWakes(t, stores) })
	}
}

func TestFleetTakenDuringAttempt(t *testing.T) {
	for name, stores := range fleetStores() {
		t.Run(name, func(t *testing.T) { fleettest.TakenDuringAttempt(t, stores) })
	}
}

func TestFleetRecoverTogether(t *testing.T) {
	// bbolt is exclusive to one process: a lease of an owner that is no Client of this
	// process is taken at once there, so the live-lease part runs on Memory only.
	fleettest.RecoverTogether(t, fleetStores()["memory"], 64)
}
