package boltstore

import (
	"bytes"
	"sync"

	"github.com/idemkit/idem/keystore"
)

// summaryCache remembers the summary (decodeSummary) of the pending record values this store
// wrote, so that the Update that follows (a call's final write, a progress write) checks its
// rules without decoding the stored JSON again: about 5 µs a record, spent inside the commit
// every waiting caller shares (a fifth of the committer's CPU at 64 callers). An entry is used
// only when the stored value is byte for byte the one it was made from, so a summary is never
// taken from anything but the value it describes: a value another process or a lease
// operation rewrote, or a write rolled back with its commit, simply misses and is decoded.
type summaryCache struct {
	mu sync.Mutex // commits run one at a time; the lock only keeps that assumption out of it
	m  map[string]summaryEntry
}

type summaryEntry struct {
	value []byte           // the records bucket value, as written (never modified)
	sum   *keystore.Record // what decodeSummary returns for it
}

// maxSummaries bounds the cache (entries, about a kilobyte each with their values): enough
// for every call of a busy client in flight, while records left pending by a crash or an
// outage cannot grow it.
const maxSummaries = 1024

// get returns the summary of v, the value stored under k, if the cache holds v's.
func (c *summaryCache) get(k, v []byte) *keystore.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[string(k)]; ok && bytes.Equal(e.value, v) {
		return e.sum
	}
	return nil
}

// put records e's value as now stored under e.key, if the record may be updated again
// (pending); any other state drops the key's entry.
func (c *summaryCache) put(e *encoded) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.rec.State != keystore.StatePending {
		delete(c.m, string(e.key))
		return
	}
	if c.m == nil {
		c.m = make(map[string]summaryEntry)
	}
	if _, ok := c.m[string(e.key)]; !ok && len(c.m) >= maxSummaries {
		return
	}
	c.m[string(e.key)] = summaryEntry{value: e.value, sum: summaryOf(e.rec)}
}

// summaryOf is the summary of r as decodeSummary returns it from r's encoding: the same
// fields, the times without a monotonic clock reading (JSON keeps none).
func summaryOf(r *keystore.Record) *keystore.Record {
	return &keystore.Record{
		Scope: r.Scope, Key: r.Key, Intent: r.Intent, Fingerprint: r.Fingerprint,
		State: r.State, CreatedAt: r.CreatedAt.Round(0), UpdatedAt: r.UpdatedAt.Round(0),
		Owner: r.Owner, LeaseUntil: r.LeaseUntil.Round(0), Fence: r.Fence,
	}
}
