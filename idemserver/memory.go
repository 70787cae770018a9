package idemserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"hash/maphash"
	"net/http"
	"sync"
	"time"
)

// Memory is a Backend in one process's memory: for tests and single-instance servers whose
// handlers keep no state that outlives the process. Create it with NewMemory.
type Memory struct {
	mu sync.Mutex
	// recs holds the records by the hash of their scope (hash): a map slot of 16 bytes, not
	// of 56 (the scope's three strings and the pointer), so the table a claim probes is a
	// third of the size and its cache misses fewer, and the collector finds one pointer per
	// slot instead of four. Records whose scopes share a hash are chained by next; a lookup
	// compares the scope itself, so a collision costs a step, never a wrong record.
	recs map[uint64]*memRecord
	n    int // records held
	seed maphash.Seed
	hash func(seed maphash.Seed, s Scope) uint64 // scopeHash; tests make every scope collide
}

// scopeHash hashes the three strings of s with seed (a fresh random one per Memory).
func scopeHash(seed maphash.Seed, s Scope) uint64 {
	return maphash.String(seed, s.Key) ^ maphash.String(seed, s.Operation)*0x9e3779b97f4a7c15 ^
		maphash.String(seed, s.Tenant)*0xbf58476d1ce4e5b9
}

// find returns the record of s (nil when none) and the hash it is stored under. Callers
// hold m.mu.
func (m *Memory) find(s Scope) (*memRecord, uint64) {
	h := m.hash(m.seed, s)
	r := m.recs[h]
	for r != nil && r.first.scope != s {
		r = r.next
	}
	return r, h
}

// insert stores r under hash h, replacing old (r's scope's previous record) if not nil.
// Callers hold m.mu.
func (m *Memory) insert(h uint64, r, old *memRecord) {
	if old != nil {
		m.unlink(h, old)
	}
	r.next = m.recs[h]
	m.recs[h] = r
	m.n++
}

// unlink removes r, stored under hash h, from the map. Callers hold m.mu.
func (m *Memory) unlink(h uint64, r *memRecord) {
	head := m.recs[h]
	if head == r {
		if r.next == nil {
			delete(m.recs, h)
		} else {
			m.recs[h] = r.next
		}
		r.next = nil
		m.n--
		return
	}
	for p := head; p != nil; p = p.next {
		if p.next == r {
			p.next, r.next = r.next, nil
			m.n--
			return
		}
	}
}

type memRecord struct {
	Record
	owner *memClaim // the live claim, nil when none
	// The claim that made the record and the fingerprint's bytes, in the record's own
	// allocation: a fresh key costs one allocation instead of three.
	first memClaim   // first.scope is the record's scope
	next  *memRecord // the next record whose scope has the same hash
	fp    [sha256.Size]byte
	// The stored answer (encodeAnswer), nil until completed; Record.Response stays nil.
	answer []byte
}

// snapshot returns a copy of the record that shares no memory with it, its answer decoded.
func (r *memRecord) snapshot() *Record {
	cp := r.Record
	cp.Fingerprint = bytes.Clone(r.Fingerprint)
	if r.answer != nil {
		cp.Response = decodeAnswer(r.answer)
	}
	return &cp
}

// NewMemory returns an empty memory backend. Each key keeps its scope, fingerprint, claim
// state and recovery point and, once answered, the answer encoded in one byte slice: about
// 400 bytes besides the answer's bytes, until Middleware.Purge removes it.
func NewMemory() *Memory {
	return &Memory{recs: make(map[uint64]*memRecord), seed: maphash.MakeSeed(), hash: scopeHash}
}

// Claim implements Backend.
func (m *Memory) Claim(ctx context.Context, req ClaimRequest) (Claim, *Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, h := m.find(req.Scope)
	old := r // replaced below when expired
	expired := false
	if r != nil {
		switch {
		case r.State == StateCompleted && !req.Now.Before(r.ExpiresAt):
			expired = true
		case !bytes.Equal(r.Fingerprint, req.Fingerprint):
			return nil, r.snapshot(), nil
		case r.State == StateCompleted, r.owner != nil, req.Now.Before(r.LockedUntil):
			return nil, r.snapshot(), nil
		}
	}
	if r != nil && !expired { // taking over a checkpointed record whose owner is gone
		c := &memClaim{m: m, rec: r, scope: req.Scope, point: r.RecoveryPoint, committed: true}
		r.owner = c
		r.LockedUntil = req.Now.Add(req.Lease)
		return c, nil, nil
	}
	r = &memRecord{Record: Record{State: StateProcessing, CreatedAt: req.Now, LockedUntil: req.Now.Add(req.Lease)}}
	if len(req.Fingerprint) == len(r.fp) {
		copy(r.fp[:], req.Fingerprint)
		r.Fingerprint = r.fp[:]
	} else {
		r.Fingerprint = bytes.Clone(req.Fingerprint)
	}
	r.first = memClaim{m: m, rec: r, scope: req.Scope, expired: expired}
	r.owner = &r.first
	m.insert(h, r, old)
	return r.owner, nil, nil
}

// Lookup implements Backend.
func (m *Memory) Lookup(ctx context.Context, s Scope, now time.Time) (*Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, _ := m.find(s)
	if r == nil || r.State == StateCompleted && !now.Before(r.ExpiresAt) {
		return nil, nil
	}
	return r.snapshot(), nil
}

// Purge implements Backend: it deletes up to limit expired completed records, in no
// particular order, and stops there.
func (m *Memory) Purge(ctx context.Context, now time.Time, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// Stop at limit: collecting and sorting every due record for each batch made a purge of n
	// records cost n/limit full scans and sorts, with every request waiting on m.mu.
	n := 0
	for h, head := range m.recs {
		for r := head; r != nil && n < limit; {
			next := r.next
			if r.State == StateCompleted && !now.Before(r.ExpiresAt) {
				m.unlink(h, r) // changing the entry during range is allowed
				n++
			}
			r = next
		}
		if n >= limit {
			break
		}
	}
	return n, nil
}

// Len returns how many records the backend holds, expired ones included.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

type memClaim struct {
	m         *Memory
	rec       *memRecord // the record it claimed
	scope     Scope
	point     string
	expired   bool
	committed bool // a checkpoint exists: releasing keeps the record
	done      bool
}

func (c *memClaim) Context(ctx context.Context) context.Context { return ctx }
func (c *memClaim) RecoveryPoint() string                       { return c.point }
func (c *memClaim) ExpiredReuse() bool                          { return c.expired }

// held returns the record while c still owns it. Callers hold c.m.mu. A record c owns is
// the one its scope maps to (no map lookup needed): records leave the map only by Release,
// which ends their claim (done), and by Purge and a new claim after expiry, which take only
// completed records, whose owner is nil.
func (c *memClaim) held() (*memRecord, error) {
	r := c.rec
	if c.done || r.owner != c {
		return nil, ErrNotOwner
	}
	return r, nil
}

func (c *memClaim) Checkpoint(ctx context.Context, point string, now time.Time, lease time.Duration) error {
	if point == "" {
		return ErrEmptyRecoveryPoint
	}
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	r, err := c.held()
	if err != nil {
		return err
	}
	r.RecoveryPoint, r.LockedUntil, c.point, c.committed = point, now.Add(lease), point, true
	return nil
}

func (c *memClaim) Complete(ctx context.Context, resp *Response, now, expires time.Time) error {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	r, err := c.held()
	if err != nil {
		return err
	}
	// Kept encoded (memanswer.go), resp itself is not kept. Lookup and Claim decode copies.
	if resp != nil {
		r.answer = encodeAnswer(resp)
	}
	r.State, r.ExpiresAt, r.owner = StateCompleted, expires, nil
	c.done = true
	return nil
}

func (c *memClaim) Release(ctx context.Context) error {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	r, err := c.held()
	if err != nil {
		return err
	}
	c.done = true
	if c.committed {
		r.owner = nil
		return nil
	}
	c.m.unlink(c.m.hash(c.m.seed, c.scope), r)
	return nil
}

var _ Backend = (*Memory)(nil)
var _ http.Handler = (*statusHandler)(nil)
