package keystore

import (
	"context"
	"errors"
	"slices"
	"time"
)

// The fleet methods of Memory. One process shares a Memory, so the mutex makes every claim
// atomic; the rules (and errors) are those of every backend, fencing included.

// Claim gives l.Owner the lease of the pending record (scope, key) with the next Fence and
// returns a copy of the claimed record. Errors: ErrInvalid (bad lease), ErrNotFound,
// ErrNotPending (wrapped), *ClaimedError (another owner's lease is live at l.Now),
// ErrClosed, ctx.Err().
func (m *Memory) Claim(ctx context.Context, scope, key string, l Lease) (*Record, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.begin(ctx); err != nil {
		return nil, err
	}
	rec, ok := m.records[scopedName{scope, key}]
	if !ok {
		return nil, ErrNotFound
	}
	if err := ClaimRefusal(&rec.Record, l); err != nil {
		return nil, err
	}
	ApplyClaim(&rec.Record, l)
	return rec.export(), nil
}

// Renew sets the LeaseUntil of (scope, key) to until if (owner, fence) holds its lease.
// Errors: ErrInvalid (empty owner, zero until), ErrNotFound, *FencedError, ErrClosed,
// ctx.Err().
func (m *Memory) Renew(ctx context.Context, scope, key, owner string, fence int64, until time.Time) error {
	if err := CheckRenew(owner, until); err != nil {
		return err
	}
	return m.holder(ctx, scope, key, owner, fence, func(rec *Record) { rec.LeaseUntil = until })
}

// Release ends the lease of (owner, fence) on (scope, key), keeping the Fence. Releasing a
// record already released at that fence returns nil. Errors: ErrInvalid (empty owner),
// ErrNotFound, *FencedError, ErrClosed, ctx.Err().
func (m *Memory) Release(ctx context.Context, scope, key, owner string, fence int64) error {
	if owner == "" {
		return errors.Join(ErrInvalid, errors.New("release without an owner"))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.begin(ctx); err != nil {
		return err
	}
	rec, ok := m.records[scopedName{scope, key}]
	if !ok {
		return ErrNotFound
	}
	if Released(&rec.Record, fence) {
		return nil
	}
	if err := CheckHolder(&rec.Record, owner, fence); err != nil {
		return err
	}
	rec.Owner, rec.LeaseUntil = "", time.Time{}
	return nil
}

// holder runs change on the stored record if (owner, fence) holds it.
func (m *Memory) holder(ctx context.Context, scope, key, owner string, fence int64, change func(*Record)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.begin(ctx); err != nil {
		return err
	}
	rec, ok := m.records[scopedName{scope, key}]
	if !ok {
		return ErrNotFound
	}
	if err := CheckHolder(&rec.Record, owner, fence); err != nil {
		return err
	}
	change(&rec.Record)
	return nil
}

// ClaimExpired claims for l.Owner up to limit pending records without a lease live at l.Now,
// oldest CreatedAt first, and returns copies of them. Errors: ErrInvalid (bad lease, limit
// < 1), ErrClosed, ctx.Err().
func (m *Memory) ClaimExpired(ctx context.Context, l Lease, limit int) ([]*Record, error) {
	if err := CheckClaimExpired(l, limit); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.begin(ctx); err != nil {
		return nil, err
	}
	var orphans []*memRecord
	for _, rec := range m.records {
		if Orphaned(&rec.Record, l.Now) {
			orphans = append(orphans, rec)
		}
	}
	slices.SortFunc(orphans, func(a, b *memRecord) int { return compareRecords(&a.Record, &b.Record) })
	orphans = orphans[:min(limit, len(orphans))]
	out := make([]*Record, len(orphans))
	for i, rec := range orphans {
		ApplyClaim(&rec.Record, l)
		out[i] = rec.export()
	}
	return out, nil
}
