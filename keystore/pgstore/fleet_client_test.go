package pgstore_test

import (
	"testing"

	"github.com/idemkit/idem/internal/fleettest"
	"github.com/idemkit/idem/keystore"
)

// The client's fleet scenarios on PostgreSQL: each instance has its own pool and Store on
// one schema, as separate processes would.
func pgInstances(t *testing.T) (keystore.Store, keystore.Store) {
	pool := testSchema(t)
	a := openStore(t, pool(), nil)
	b := openStore(t, pool(), nil)
	return a, b
}

func TestClientFleetSameIntentAtOnce(t *testing.T) { fleettest.SameIntentAtOnce(t, pgInstances) }
func TestClientFleetStaleOwnerWakes(t *testing.T)  { fleettest.StaleOwnerWakes(t, pgInstances) }
func TestClientFleetTakenDuringAttempt(t *testing.T) {
	fleettest.TakenDuringAttempt(t, pgInstances)
}
func TestClientFleetRecoverTogether(t *testing.T) { fleettest.RecoverTogether(t, pgInstances, 200) }
