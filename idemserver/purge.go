package idemserver

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DefaultPurgeBatch is the batch size of Purge when batch <= 0.
const DefaultPurgeBatch = 1000

// Purge deletes stored answers past Config.Retention in batches of at most batch records
// (DefaultPurgeBatch when batch <= 0), so that no single delete holds the store for long,
// until none is left or ctx ends. It returns how many it deleted; the error is ctx's or the
// backend's.
func (m *Middleware) Purge(ctx context.Context, batch int) (int, error) {
	if batch <= 0 {
		batch = DefaultPurgeBatch
	}
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := m.cfg.Backend.Purge(ctx, m.cfg.Now(), batch)
		total += n
		m.n.purged.Add(int64(n))
		if err != nil {
			return total, fmt.Errorf("idemserver: purge: %w", err)
		}
		if n < batch {
			return total, nil
		}
	}
}

// PurgeEvery runs Purge every interval until ctx ends, and returns ctx's error. A failed
// purge is retried at the next tick; onError, if set, hears of it.
func (m *Middleware) PurgeEvery(ctx context.Context, interval time.Duration, batch int, onError func(error)) error {
	if interval <= 0 {
		return fmt.Errorf("%w: purge interval %v", ErrInvalidConfig, interval)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if _, err := m.Purge(ctx, batch); err != nil && !errors.Is(err, ctx.Err()) && onError != nil {
				onError(err)
			}
		}
	}
}
