package idem

import (
	"context"

	"github.com/idemkit/idem/keystore"
)

// updateFinal writes a call's final state. When the store can defer the write
// (keystore.DeferredUpdater), the call does not wait for its sync: the one synchronous write
// of a call is the Create before the first byte. Losing the final write in a crash is safe by
// construction: the record is still pending, so the next Do or Recover asks the status
// endpoint (or, without one, resends with the same key, which the server deduplicates).
func (c *Client) updateFinal(ctx context.Context, rec *keystore.Record) error {
	if d, ok := c.store.(keystore.DeferredUpdater); ok {
		return d.UpdateDeferred(ctx, rec)
	}
	return c.store.Update(ctx, rec)
}
