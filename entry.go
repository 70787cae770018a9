package idem

import (
	"context"
	"fmt"
)

// checkEntry refuses a call that would otherwise panic: a nil *Client or one not made by
// NewClient (ErrInvalidConfig), or a nil context (ErrInvalidOperation).
func checkEntry(c *Client, ctx context.Context) error {
	if c == nil || c.store == nil {
		return fmt.Errorf("%w: nil or zero *idem.Client; create it with NewClient", ErrInvalidConfig)
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context; use context.Background()", ErrInvalidOperation)
	}
	return nil
}
