package boltstore

import (
	"bytes"
	"sync"
	"time"

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

// maxSummaries bounds the cache's entries: enough for every call of a busy client in flight,
// while records left pending by an outage cannot grow it. With maxSummaryValue it bounds the
// cache's memory to 4 MiB.
const maxSummaries = 1024

// maxSummaryValue is the largest value (bytes) cached: a record with a large body is decoded
// at its update rather than kept in memory while it is pending.
const maxSummaryValue = 4096

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
// (pending) and summaryOf gives its summary exactly; otherwise it drops the key's entry.
func (c *summaryCache) put(e *encoded) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.rec.State != keystore.StatePending || len(e.value) > maxSummaryValue || !wholeMinuteZones(e.rec) {
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

// drop forgets the entry of k, whose value another write (a lease operation) replaced.
func (c *summaryCache) drop(k []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, string(k))
}

// wholeMinuteZones reports whether r's times are in zones whose offset is whole minutes. JSON
// (RFC 3339) writes an offset in hours and minutes only, so a time in a zone offset by some
// seconds (a caller's FixedZone, or local mean time before 1900) is stored a few seconds off
// and decodes to another instant than the one summaryOf would keep.
func wholeMinuteZones(r *keystore.Record) bool {
	for _, t := range [...]time.Time{r.CreatedAt, r.UpdatedAt, r.LeaseUntil} {
		if _, off := t.Zone(); off%60 != 0 {
			return false
		}
	}
	return true
}

// summaryOf is the summary of r as decodeSummary returns it from r's encoding (when
// wholeMinuteZones): the same fields, the times without a monotonic clock reading (JSON keeps
// none).
func summaryOf(r *keystore.Record) *keystore.Record {
	return &keystore.Record{
		Scope: r.Scope, Key: r.Key, Intent: r.Intent, Fingerprint: r.Fingerprint,
		State: r.State, CreatedAt: r.CreatedAt.Round(0), UpdatedAt: r.UpdatedAt.Round(0),
		Owner: r.Owner, LeaseUntil: r.LeaseUntil.Round(0), Fence: r.Fence,
	}
}
