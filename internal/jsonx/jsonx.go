// Package jsonx holds JSON checks shared by idem and its outcome package.
package jsonx

import (
	"encoding/json"
	"strings"
)

// DuplicateMember reports whether body's top-level object names a member twice, letter case
// aside (encoding/json matches names that way and keeps the last): {"status":"processing",
// "status":"not_found"} must not be read as either, since parsers disagree on which counts.
// Called on a body json.Unmarshal accepted: it walks the top level's member names and skips
// their values without building them (every status check's answer goes through it, so a
// json.Decoder's tokens cost a Recover as much as the request did); a body that is not
// valid JSON gives false (json.Valid first: the walk skips values without checking them).
func DuplicateMember(body []byte) bool {
	if !json.Valid(body) {
		return false
	}
	var small [16]string // the names seen, while few: no map for the usual answer
	seen := small[:0]
	var many map[string]bool
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return false
	}
	i++
	for {
		i = skipSpace(body, i)
		if i >= len(body) || body[i] != '"' { // '}': an empty object
			return false
		}
		end, plain := skipString(body, i)
		if end < 0 {
			return false
		}
		name, ok := foldedName(body[i:end], plain)
		if !ok {
			return false
		}
		switch {
		case many != nil:
			if many[name] {
				return true
			}
			many[name] = true
		default:
			for _, s := range seen {
				if s == name {
					return true
				}
			}
			if len(seen) < cap(seen) {
				seen = append(seen, name)
				break
			}
			many = make(map[string]bool, 2*len(seen))
			for _, s := range seen {
				many[s] = true
			}
			many[name] = true
		}
		i = skipSpace(body, end)
		if i >= len(body) || body[i] != ':' {
			return false
		}
		if i = skipValue(body, skipSpace(body, i+1)); i < 0 {
			return false
		}
		i = skipSpace(body, i)
		if i >= len(body) || body[i] != ',' { // '}': the last member
			return false
		}
		i++
	}
}

// foldedName returns a member name (quotes included) decoded as encoding/json does and
// folded as it matches names: strings.ToLower(strings.ToUpper(name)), so that "ſ" meets "s".
// A plain name (printable ASCII, no escape) is its bytes, folded in ASCII.
func foldedName(quoted []byte, plain bool) (string, bool) {
	if plain {
		raw := quoted[1 : len(quoted)-1]
		for k, c := range raw {
			if 'A' <= c && c <= 'Z' { // copied and folded from here on
				b := []byte(string(raw))
				for ; k < len(b); k++ {
					if c := b[k]; 'A' <= c && c <= 'Z' {
						b[k] = c + 'a' - 'A'
					}
				}
				return string(b), true
			}
		}
		return string(raw), true
	}
	var name string
	if json.Unmarshal(quoted, &name) != nil {
		return "", false
	}
	return strings.ToLower(strings.ToUpper(name)), true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] ('"'), or -1 if it does
// not end; plain is false when it holds an escape or a byte outside printable ASCII.
func skipString(b []byte, i int) (end int, plain bool) {
	plain = true
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return j + 1, plain
		case c == '\\':
			plain = false
			j++ // the escaped byte: a quote or a backslash does not end the string
		case c < 0x20 || c >= 0x7f:
			plain = false
		}
	}
	return -1, false
}

// skipValue returns the index after the JSON value starting at b[i], or -1 if it does not
// end. The value is taken as valid: objects and arrays are skipped by their brackets,
// strings inside them included.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		end, _ := skipString(b, i)
		return end
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, _ := skipString(b, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i // a number, true, false or null: up to the next delimiter
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' &&
		b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}
