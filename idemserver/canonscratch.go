package idemserver

import "sync"

// canonScratch is the memory canonicalizeWith works in: its tables and its output. The
// middleware takes one from scratchPool for each request and gives it back once the body's
// fingerprint is made, so that a request allocates none of them.
type canonScratch struct {
	objs    []object
	members []member
	stack   []member
	out     []byte
}

// scratchPool holds canonScratch values for the middleware's requests.
var scratchPool = sync.Pool{New: func() any { return new(canonScratch) }}

// maxPooledScratch is the largest body, in bytes, whose scratch goes back to scratchPool: a
// rare large body's tables are left to the collector rather than kept for every request.
const maxPooledScratch = 64 << 10

// release gives s back to scratchPool; the canonical form made in it is no longer read.
func (s *canonScratch) release() {
	if cap(s.out) > maxPooledScratch {
		return
	}
	scratchPool.Put(s)
}

// reuse returns s emptied if it holds n elements, else a new slice of capacity n (exactly:
// slices.Grow may allocate twice under the race detector, and rounds up).
func reuse[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:0]
	}
	return make([]T, 0, n)
}
