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
	return m.claimOne(ctx, scope, key, l, ClaimRefusal)
}

// claimOne gives l.Owner the lease of the record (scope, key), with the next Fence, unless
// refusal says why not (ClaimRefusal, ManualClaimRefusal), and returns a copy of it.
func (m *Memory) claimOne(ctx context.Context, scope, key string, l Lease, refusal func(*Record, Lease) error) (*Record, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.begin(ctx); err != nil {
		return nil, err
	}
	k := scopedName{scope, key}
	rec, ok := m.records[k]
	if !ok {
		return nil, ErrNotFound
	}
	r := rec.rules(k)
	if err := refusal(&r, l); err != nil {
		return nil, err
	}
	ApplyClaim(&r, l)
	rec.setLease(&r)
	return rec.export(k), nil
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
	k := scopedName{scope, key}
	rec, ok := m.records[k]
	if !ok {
		return ErrNotFound
	}
	r := rec.rules(k)
	if Released(&r, fence) {
		return nil
	}
	if err := CheckHolder(&r, owner, fence); err != nil {
		return err
	}
	rec.owner, rec.leaseUntil = "", time.Time{}
	return nil
}

// holder runs change on the stored record if (owner, fence) holds it.
func (m *Memory) holder(ctx context.Context, scope, key, owner string, fence int64, change func(*Record)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.begin(ctx); err != nil {
		return err
	}
	k := scopedName{scope, key}
	rec, ok := m.records[k]
	if !ok {
		return ErrNotFound
	}
	r := rec.rules(k)
	if err := CheckHolder(&r, owner, fence); err != nil {
		return err
	}
	change(&r)
	rec.setLease(&r)
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
	type orphan struct {
		k    scopedName
		rec  *memRecord
		rule Record
	}
	var orphans []orphan
	for k, rec := range m.records {
		if r := rec.rules(k); Orphaned(&r, l.Now) {
			orphans = append(orphans, orphan{k, rec, r})
		}
	}
	slices.SortFunc(orphans, func(a, b orphan) int { return compareRecords(&a.rule, &b.rule) })
	orphans = orphans[:min(limit, len(orphans))]
	out := make([]*Record, len(orphans))
	for i, o := range orphans {
		ApplyClaim(&o.rule, l)
		o.rec.setLease(&o.rule)
		out[i] = o.rec.export(o.k)
	}
	return out, nil
}

// ClaimManual gives l.Owner the lease of the manual record (scope, key) with the next Fence
// and returns a copy of it (keystore.ManualClaimer). Errors: ErrInvalid (bad lease),
// ErrNotFound, ErrStateChanged (wrapped: not manual), *ClaimedError, ErrClosed, ctx.Err().
func (m *Memory) ClaimManual(ctx context.Context, scope, key string, l Lease) (*Record, error) {
	return m.claimOne(ctx, scope, key, l, ManualClaimRefusal)
}
