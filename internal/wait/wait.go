// Package wait holds the real-timer wait that idem, idemserver and probe use when no clock is
// injected (their Config.Sleep).
package wait

import (
	"context"
	"time"
)

// Sleep waits d on a real timer and returns nil, or returns ctx.Err() as soon as ctx ends
// (at once for a d of zero or less).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
