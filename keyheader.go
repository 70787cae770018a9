package idem

import (
	"fmt"
	"strings"
)

// A key header the caller set on an operation becomes its key.

// adoptKeyHeader makes a key header given among the operation's headers (any letter case)
// the operation's key, validated like WithKey, so that the persisted key, every attempt and
// every status check carry one value. It conflicts with a different WithKey key, or with
// itself when given twice: ErrInvalidOperation.
func (c *Client) adoptKeyHeader(op *Operation) (*Operation, error) {
	var name string
	var values []string
	for k, vs := range op.header {
		if strings.EqualFold(k, c.cfg.KeyHeader) {
			if name != "" {
				return nil, fmt.Errorf("%w: the key header %s is given twice (%s, %s)", ErrInvalidOperation, c.cfg.KeyHeader, name, k)
			}
			name, values = k, vs
		}
	}
	if name == "" {
		return op, nil
	}
	if len(values) != 1 {
		return nil, fmt.Errorf("%w: the key header %s has %d values, want one", ErrInvalidOperation, name, len(values))
	}
	key := strings.Trim(values[0], " \t")
	if c.cfg.KeyAsSFString && strings.HasPrefix(key, `"`) {
		if k, ok := unquoteSF(key); ok {
			key = k
		}
	}
	if err := ValidateKey(key); err != nil {
		return nil, fmt.Errorf("key header %s: %w", name, err)
	}
	if op.hasKey && key != op.key {
		return nil, fmt.Errorf("%w: the key header %s (%q) conflicts with WithKey (%q)", ErrInvalidOperation, name, key, op.key)
	}
	adopted := *op
	adopted.key, adopted.hasKey = key, true
	adopted.header = op.header.Clone()
	delete(adopted.header, name)
	return &adopted, nil
}

// unquoteSF reads an RFC 8941 sf-string ("..." with \" and \\ escapes).
func unquoteSF(s string) (string, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", false
	}
	var b strings.Builder
	for i := 1; i < len(s)-1; i++ {
		if s[i] == '\\' {
			i++
			if i >= len(s)-1 {
				return "", false
			}
		}
		b.WriteByte(s[i])
	}
	return b.String(), true
}
