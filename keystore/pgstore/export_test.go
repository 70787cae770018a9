package pgstore

import "testing"

// SetParkLimits sets parkKeep and parkBatch until t ends. Tests that call it must not run in
// parallel with others of this package.
func SetParkLimits(t testing.TB, keep, batch int) {
	oldKeep, oldBatch := parkKeep, parkBatch
	parkKeep, parkBatch = keep, batch
	t.Cleanup(func() { parkKeep, parkBatch = oldKeep, oldBatch })
}
