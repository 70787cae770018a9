package idemserver

import (
	"bytes"
	"encoding/json"
	"slices"
	"unicode"
	"unicode/utf8"
)

// CanonicalBody returns body in the form the fingerprint hashes: a body that is valid JSON
// has its insignificant whitespace removed and the members of every object sorted by the
// bytes of their names; strings and numbers keep their exact text, so "A" and "\u0041", or
// 1 and 1.0, differ; isJSON is true. Any other body is returned unchanged, byte for byte,
// with isJSON false.
//
// An object in which two member names may be one name to a JSON parser (equal once escapes
// are decoded and letter case folded as encoding/json matches struct fields, so "amount",
// "\u0061mount" and "Amount") keeps all its members in input order, unsorted: parsers differ
// on which duplicate wins, so two such bodies in another order are other requests and never
// share a canonical form. (The middleware refuses exact duplicates before fingerprinting;
// see ProblemBodyDuplicateMember.)
func CanonicalBody(body []byte) (canonical []byte, isJSON bool) {
	c := canonicalize(body)
	return c.out, c.isJSON
}

// canonical is a body's canonical form and what the one pass that made it found.
type canonical struct {
	out    []byte // CanonicalBody's result
	isJSON bool
	dup    string // the first member name (decoded) that appears twice in one object
	hasDup bool
}

// canonicalize is CanonicalBody, also reporting an exact duplicate member name, so that the
// middleware walks a body once for its duplicate check and its fingerprint.
func canonicalize(body []byte) canonical {
	if len(bytes.TrimSpace(body)) == 0 || !json.Valid(body) {
		return canonical{out: body}
	}
	c := canon{in: body}
	c.scan()
	c.pos = 0
	c.ws()
	c.out = make([]byte, 0, len(body))
	c.emit(c.pos)
	return canonical{out: c.out, isJSON: true, dup: c.dup, hasDup: c.hasDup}
}

// duplicateMember returns the first member name (decoded) that appears twice in one object
// of a valid JSON body; dup is false for any other body.
func duplicateMember(body []byte) (name string, dup bool) {
	c := canonicalize(body)
	return c.dup, c.hasDup
}

// canon re-encodes a document json.Valid accepted; it trusts that validation. It works in two
// passes over the input, each byte read a bounded number of times whatever the nesting: scan
// finds every object's members (where each name and value starts) and orders them, emit then
// writes each value once, following that order. Building each member's value apart and
// copying it into its object instead copied a byte once per enclosing object: a 1 MiB body
// nested 10,000 deep took seconds and gigabytes.
type canon struct {
	in     []byte
	pos    int
	out    []byte
	objs   []object // every object of the document, by the offset of its '{'
	dup    string   // the first exact duplicate member name seen, decoded
	hasDup bool
}

// object is one object of the input, its members in the order emit writes them.
type object struct {
	start, end int // offsets of '{' and just past '}'
	members    []member
}

// member is one member of an object: its name as written (quotes included) and the offset
// of its value.
type member struct {
	key []byte
	val int
}

func (c *canon) ws() {
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

// scan walks the value at c.pos (after whitespace), recording its objects.
func (c *canon) scan() {
	c.ws()
	switch c.in[c.pos] {
	case '{':
		i := len(c.objs)
		c.objs = append(c.objs, object{start: c.pos})
		c.pos++
		var members []member
		for {
			c.ws()
			if c.in[c.pos] == '}' {
				c.pos++
				break
			}
			key := c.in[c.pos:c.stringEnd()]
			c.ws()
			c.pos++ // ':'
			c.ws()
			members = append(members, member{key: key, val: c.pos})
			c.scan()
			c.ws()
			if c.in[c.pos] == ',' {
				c.pos++
			}
		}
		if !c.alike(members) {
			slices.SortFunc(members, func(a, b member) int { return bytes.Compare(a.key, b.key) })
		}
		c.objs[i].members, c.objs[i].end = members, c.pos // by index: nested objects grew c.objs
	case '[':
		c.pos++
		for {
			c.ws()
			if c.in[c.pos] == ']' {
				c.pos++
				return
			}
			c.scan()
			c.ws()
			if c.in[c.pos] == ',' {
				c.pos++
			}
		}
	case '"':
		c.stringEnd()
	default:
		c.scalarEnd()
	}
}

// emit writes the canonical form of the value starting at at (no whitespace before it) and
// returns the offset just past it.
func (c *canon) emit(at int) int {
	switch c.in[at] {
	case '{':
		i, _ := slices.BinarySearchFunc(c.objs, at, func(o object, at int) int { return o.start - at })
		o := &c.objs[i]
		c.out = append(c.out, '{')
		for k, m := range o.members {
			if k > 0 {
				c.out = append(c.out, ',')
			}
			c.out = append(c.out, m.key...)
			c.out = append(c.out, ':')
			c.emit(m.val)
		}
		c.out = append(c.out, '}')
		return o.end
	case '[':
		c.out = append(c.out, '[')
		c.pos = at + 1
		for {
			c.ws()
			if c.in[c.pos] == ']' {
				c.out = append(c.out, ']')
				return c.pos + 1
			}
			c.pos = c.emit(c.pos)
			c.ws()
			if c.in[c.pos] == ',' {
				c.out = append(c.out, ',')
				c.pos++
			}
		}
	case '"':
		c.pos = at
		end := c.stringEnd()
		c.out = append(c.out, c.in[at:end]...)
		return end
	default: // number, true, false, null
		c.pos = at
		end := c.scalarEnd()
		c.out = append(c.out, c.in[at:end]...)
		return end
	}
}

// stringEnd advances past the string at c.pos and returns the index after its closing quote.
func (c *canon) stringEnd() int {
	c.pos++
	for c.in[c.pos] != '"' {
		if c.in[c.pos] == '\\' {
			c.pos++
		}
		c.pos++
	}
	c.pos++
	return c.pos
}

// scalarEnd advances past the number or literal at c.pos and returns the index after it.
func (c *canon) scalarEnd() int {
	for c.pos < len(c.in) && !bytes.ContainsRune([]byte(" \t\r\n,]}"), rune(c.in[c.pos])) {
		c.pos++
	}
	return c.pos
}

// alike reports whether two of members have names a parser may read as one (see
// CanonicalBody), and records the first exact duplicate.
func (c *canon) alike(members []member) bool {
	if len(members) < 2 {
		return false
	}
	if len(members) <= 16 && allPlain(members) {
		return c.alikePlain(members)
	}
	names := make([]string, len(members))
	folded := make([]string, len(members))
	for i, m := range members {
		names[i] = decodeName(m.key)
		folded[i] = foldName(names[i])
	}
	alike := false
	note := func(i, j int) {
		alike = true
		if names[i] == names[j] && !c.hasDup {
			c.dup, c.hasDup = names[i], true
		}
	}
	if len(members) <= 16 { // small objects: no maps
		for i := range folded {
			for j := range i {
				if folded[i] == folded[j] {
					note(j, i)
				}
			}
		}
		return alike
	}
	byFold := make(map[string]int, len(folded))
	byName := make(map[string]int, len(names))
	for i := range folded {
		if j, ok := byName[names[i]]; ok {
			note(j, i)
		} else {
			byName[names[i]] = i
		}
		if j, ok := byFold[folded[i]]; ok {
			note(j, i)
		} else {
			byFold[folded[i]] = i
		}
	}
	return alike
}

// allPlain reports whether every name is ASCII without escapes, the common case: such names
// decode to themselves and fold as ASCII, so they compare without allocating.
func allPlain(members []member) bool {
	for _, m := range members {
		for _, b := range m.key[1 : len(m.key)-1] {
			if b == '\\' || b >= utf8.RuneSelf {
				return false
			}
		}
	}
	return true
}

// alikePlain is alike for plain names (see allPlain).
func (c *canon) alikePlain(members []member) bool {
	alike := false
	for i := range members {
		for j := range i {
			a, b := members[j].key, members[i].key
			if !asciiEqualFold(a, b) {
				continue
			}
			alike = true
			if !c.hasDup && bytes.Equal(a, b) {
				c.dup, c.hasDup = string(a[1:len(a)-1]), true
			}
		}
	}
	return alike
}

func asciiEqualFold(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if 'a' <= y && y <= 'z' {
			y -= 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// decodeName returns a member name (a valid JSON string, with quotes) as encoding/json
// decodes it: escapes resolved, invalid UTF-8 and lone surrogates as U+FFFD.
func decodeName(raw []byte) string {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner)
	}
	var s string
	_ = json.Unmarshal(raw, &s) // valid: json.Valid accepted the document
	return s
}

// foldName folds letter case as encoding/json does when it matches a member name to a
// struct field: ASCII letters to upper case, other runes to ToUpper(ToLower(r)).
func foldName(s string) string {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		if r < utf8.RuneSelf {
			if 'a' <= r && r <= 'z' {
				r -= 'a' - 'A'
			}
			out = append(out, byte(r))
			continue
		}
		out = utf8.AppendRune(out, unicode.ToUpper(unicode.ToLower(r)))
	}
	return string(out)
}
