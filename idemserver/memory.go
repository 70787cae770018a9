package idemserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"net/http"
	"sync"
	"time"
)

// Memory is a Backend in one process's memory: for tests and single-instance servers whose
// handlers keep no state that outlives the process. Create it with NewMemory.
type Memory struct {
	mu   sync.Mutex
	recs map[Scope]*memRecord
}

type memRecord struct {
	Record
	owner *memClaim // the live claim, nil when none
	// The claim that made the record and the fingerprint's bytes, in the record's own
	// allocation: a fresh key costs one allocation instead of three.
	first memClaim
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

// NewMemory returns an empty memory backend.
func NewMemory() *Memory { return &Memory{recs: make(map[Scope]*memRecord)} }

// Claim implements Backend.
func (m *Memory) Claim(ctx context.Context, req ClaimRequest) (Claim, *Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.recs[req.Scope]
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
	m.recs[req.Scope] = r
	return r.owner, nil, nil
}

// Lookup implements Backend.
func (m *Memory) Lookup(ctx context.Context, s Scope, now time.Time) (*Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.recs[s]
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
	for s, r := range m.recs {
		if n >= limit {
			break
		}
		if r.State == StateCompleted && !now.Before(r.ExpiresAt) {
			delete(m.recs, s) // deleting during range is allowed; the entry is not visited again
			n++
		}
	}
	return n, nil
}

// Len returns how many records the backend holds, expired ones included.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.recs)
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
	delete(c.m.recs, c.scope)
	return nil
}

var _ Backend = (*Memory)(nil)
var _ http.Handler = (*statusHandler)(nil)
