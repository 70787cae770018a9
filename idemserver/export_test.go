package idemserver

import "hash/maphash"

// NewMemoryColliding returns a Memory whose scopes all share one hash, so that every record
// is found by walking the collision chain: the conformance suite run on it tests the chain.
func NewMemoryColliding() *Memory {
	m := NewMemory()
	m.hash = func(maphash.Seed, Scope) uint64 { return 42 }
	return m
}
