package keystore

// Exclusive is implemented by a store that only one process can use at a time (the bbolt
// file store holds an exclusive file lock). In such a store a lease whose owner is not an
// instance of the current process belongs to a process that has ended, so the client takes
// it over at once instead of waiting for it to expire: a restarted process reconciles what
// it left pending without waiting for LeaseTTL. Stores shared by several processes
// (keystore/pgstore) must not implement it.
type Exclusive interface {
	// Exclusive reports whether the store is held by this process alone.
	Exclusive() bool
}
