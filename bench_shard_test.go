package idem_test

import (
	"context"
	"errors"
	"hash/fnv"
	"time"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// routedStore spreads records over several bbolt files by key, for BenchmarkDurable's
// idem-shardN variants only: it measures what a sharded store could gain at 64 callers. It
// is not a keystore (no cross-file intent uniqueness, List and ClaimExpired unordered).
type routedStore struct{ shards []*boltstore.Store }

func (r *routedStore) of(key string) *boltstore.Store {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return r.shards[h.Sum32()%uint32(len(r.shards))]
}

func (r *routedStore) Create(ctx context.Context, rec *keystore.Record) error {
	return r.of(rec.Key).Create(ctx, rec)
}

func (r *routedStore) Get(ctx context.Context, scope, key string) (*keystore.Record, error) {
	return r.of(key).Get(ctx, scope, key)
}

func (r *routedStore) GetByIntent(ctx context.Context, scope, intent string) (*keystore.Record, error) {
	for _, s := range r.shards {
		rec, err := s.GetByIntent(ctx, scope, intent)
		if !errors.Is(err, keystore.ErrNotFound) {
			return rec, err
		}
	}
	return nil, keystore.ErrNotFound
}

func (r *routedStore) Update(ctx context.Context, rec *keystore.Record) error {
	return r.of(rec.Key).Update(ctx, rec)
}

func (r *routedStore) UpdateDeferred(ctx context.Context, rec *keystore.Record) error {
	return r.of(rec.Key).UpdateDeferred(ctx, rec)
}

func (r *routedStore) UpdateFromState(ctx context.Context, rec *keystore.Record, from keystore.State) error {
	return r.of(rec.Key).UpdateFromState(ctx, rec, from)
}

func (r *routedStore) Claim(ctx context.Context, scope, key string, l keystore.Lease) (*keystore.Record, error) {
	return r.of(key).Claim(ctx, scope, key, l)
}

func (r *routedStore) Renew(ctx context.Context, scope, key, owner string, fence int64, until time.Time) error {
	return r.of(key).Renew(ctx, scope, key, owner, fence, until)
}

func (r *routedStore) Release(ctx context.Context, scope, key, owner string, fence int64) error {
	return r.of(key).Release(ctx, scope, key, owner, fence)
}

func (r *routedStore) ClaimExpired(ctx context.Context, l keystore.Lease, limit int) ([]*keystore.Record, error) {
	var all []*keystore.Record
	for _, s := range r.shards {
		recs, err := s.ClaimExpired(ctx, l, limit-len(all))
		all = append(all, recs...)
		if err != nil || len(all) >= limit {
			return all, err
		}
	}
	return all, nil
}

func (r *routedStore) List(ctx context.Context, states ...keystore.State) ([]*keystore.Record, error) {
	var all []*keystore.Record
	for _, s := range r.shards {
		recs, err := s.List(ctx, states...)
		if err != nil {
			return nil, err
		}
		all = append(all, recs...)
	}
	return all, nil
}

func (r *routedStore) Purge(ctx context.Context, cutoff time.Time) (int, error) {
	n := 0
	for _, s := range r.shards {
		d, err := s.Purge(ctx, cutoff)
		n += d
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (r *routedStore) Exclusive() bool { return true }

func (r *routedStore) Close() error {
	var errs []error
	for _, s := range r.shards {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}
