package idemserver

import (
	"errors"
	"fmt"
	"strings"
)

// MaxKeyLength is the longest idempotency key accepted, in characters after unquoting.
const MaxKeyLength = 255

// ErrInvalidKey is returned by ParseKey for a header value that is neither an RFC 8941
// sf-string nor a bare token of visible ASCII, or that is empty or longer than MaxKeyLength.
var ErrInvalidKey = errors.New("idemserver: invalid idempotency key")

// ParseKey returns the key carried by an Idempotency-Key header value: an RFC 8941 §3.3.3
// sf-string ("..." with \" and \\ escapes, printable ASCII inside) as the IETF draft
// requires, or a bare token of visible ASCII (0x21-0x7E, no '"') as most clients send it.
// Errors match ErrInvalidKey.
func ParseKey(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return "", fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	var key string
	if v[0] == '"' {
		var b strings.Builder
		closed := false
		for i := 1; i < len(v); i++ {
			c := v[i]
			switch {
			case c == '\\':
				if i+1 >= len(v) || (v[i+1] != '"' && v[i+1] != '\\') {
					return "", fmt.Errorf("%w: bad escape in sf-string", ErrInvalidKey)
				}
				i++
				b.WriteByte(v[i])
			case c == '"':
				if i != len(v)-1 {
					return "", fmt.Errorf("%w: characters after the closing quote", ErrInvalidKey)
				}
				closed = true
			case c < 0x20 || c > 0x7e:
				return "", fmt.Errorf("%w: byte 0x%02x in sf-string", ErrInvalidKey, c)
			default:
				b.WriteByte(c)
			}
		}
		if !closed {
			return "", fmt.Errorf("%w: unterminated sf-string", ErrInvalidKey)
		}
		key = b.String()
	} else {
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < 0x21 || c > 0x7e || c == '"' {
				return "", fmt.Errorf("%w: byte 0x%02x at %d", ErrInvalidKey, c, i)
			}
		}
		key = v
	}
	if key == "" {
		return "", fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if len(key) > MaxKeyLength {
		return "", fmt.Errorf("%w: %d characters, at most %d", ErrInvalidKey, len(key), MaxKeyLength)
	}
	return key, nil
}
