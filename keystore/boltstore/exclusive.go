package boltstore

import "github.com/idemkit/idem/keystore"

var _ keystore.Exclusive = (*Store)(nil)

// Exclusive reports true: the file lock Open takes keeps every other process out, so a lease
// in the file whose owner is not an instance of this process was left by a process that
// has ended (keystore.Exclusive).
func (s *Store) Exclusive() bool { return true }
