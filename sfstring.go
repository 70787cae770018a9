package idem

import "strings"

// sfString encodes key as an RFC 8941 §3.3.3 sf-string: quoted, with '"' and '\' escaped.
// Keys are visible ASCII (ValidateKey), which sf-strings can carry.
func sfString(key string) string {
	var b strings.Builder
	b.Grow(len(key) + 2)
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		if key[i] == '"' || key[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(key[i])
	}
	b.WriteByte('"')
	return b.String()
}
