package idemserver

import (
	"bytes"
	"encoding/json"
	"math"
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
	if c.isJSON && len(c.out) > 0 && &c.out[0] == &body[0] {
		return bytes.Clone(c.out), true // already canonical (canonicalJSON): a copy, as before
	}
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
	return canonicalizeWith(body, &canonScratch{})
}

// canonicalizeWith is canonicalize working in s: the canonical form it returns lives in s
// until s is reused, or is body itself when body is already canonical (canonicalJSON).
func canonicalizeWith(body []byte, s *canonScratch) canonical {
	if len(body) > math.MaxInt32 {
		return canonical{out: body}
	}
	if canonicalJSON(body) { // valid and already canonical: json.Valid and the tables are not needed
		return canonical{out: body, isJSON: true}
	}
	if len(bytes.TrimSpace(body)) == 0 || !json.Valid(body) {
		return canonical{out: body}
	}
	return canonicalizeFull(body, s)
}

// canonicalizeFull is canonicalizeWith for a valid document that is not already canonical
// (canonicalJSON): the passes that build its tables and write its canonical form in s.
func canonicalizeFull(body []byte, s *canonScratch) canonical {
	c := canon{in: body}
	objects, members := count(body)
	c.objs, c.members, c.stack = reuse(s.objs, objects), reuse(s.members, members), s.stack[:0]
	c.scan(skipWS(body, 0))
	c.out = reuse(s.out, len(body))
	c.emit(skipWS(body, 0), 0)
	s.objs, s.members, s.stack, s.out = c.objs, c.members, c.stack, c.out
	return canonical{out: c.out, isJSON: true, dup: c.dup, hasDup: c.hasDup}
}

// duplicateMember returns the first member name (decoded) that appears twice in one object
// of a valid JSON body; dup is false for any other body.
func duplicateMember(body []byte) (name string, dup bool) {
	c := canonicalize(body)
	return c.dup, c.hasDup
}

// canon re-encodes a document json.Valid accepted; it trusts that validation. It works in
// passes over the input, each byte read a bounded number of times whatever the shape: count
// sizes the tables, scan records every object's members (where each name and value starts)
// in the order emit must write them, and emit writes each value once, following them.
// Building each member's value apart and copying it into its object instead copied a byte
// once per enclosing object: a 1 MiB body nested 9,999 deep took seconds and gigabytes.
// Offsets are int32 (bodies over 2 GiB are not canonicalised) so that the tables stay a small
// multiple of the body even for one made of empty objects.
type canon struct {
	in      []byte
	out     []byte
	objs    []object // every object of the document, in the order of their '{'
	members []member // every object's members, object by object, in emit's order
	stack   []member // members of the objects scan is inside of
	dup     string   // the first exact duplicate member name seen, decoded
	hasDup  bool
}

// object is one object of the input.
type object struct {
	end   int32 // offset just past its '}'
	first int32 // its members are members[first : first+n]
	n     int32
	next  int32 // index in objs of the first object after it and all it holds
}

// member is one member of an object.
type member struct {
	ks, ke int32 // its name as written, quotes included: in[ks:ke]
	val    int32 // offset of its value
	obj    int32 // index in objs of the first object at or after val
}

// key is m's name as written, quotes included.
func (c *canon) key(m member) []byte { return c.in[m.ks:m.ke] }

// count returns how many objects and members (a ':' outside strings) a valid document holds.
func count(in []byte) (objects, members int) {
	for i := 0; i < len(in); i++ {
		switch in[i] {
		case '{':
			objects++
		case ':':
			members++
		case '"':
			i = stringEnd(in, i) - 1
		}
	}
	return objects, members
}

// skipWS returns the offset of the first byte at or after i that is not JSON whitespace.
func skipWS(in []byte, i int) int {
	for i < len(in) {
		switch in[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// stringEnd returns the offset just past the string that starts (with its quote) at i.
func stringEnd(in []byte, i int) int {
	i++
	for in[i] != '"' {
		if in[i] == '\\' {
			i++
		}
		i++
	}
	return i + 1
}

// scalarEnd returns the offset just past the number or literal that starts at i.
func scalarEnd(in []byte, i int) int {
	for i < len(in) && !bytes.ContainsRune([]byte(" \t\r\n,]}"), rune(in[i])) {
		i++
	}
	return i
}

// scan records the objects of the value at i (no whitespace before it) and returns the
// offset just past it.
func (c *canon) scan(i int) int {
	switch c.in[i] {
	case '{':
		o := len(c.objs)
		c.objs = append(c.objs, object{})
		base := len(c.stack)
		for i = skipWS(c.in, i+1); c.in[i] != '}'; i = skipWS(c.in, i) {
			ks := i
			ke := stringEnd(c.in, i)
			i = skipWS(c.in, skipWS(c.in, ke)+1) // past ':'
			c.stack = append(c.stack, member{ks: int32(ks), ke: int32(ke), val: int32(i), obj: int32(len(c.objs))})
			i = skipWS(c.in, c.scan(i))
			if c.in[i] == ',' {
				i++
			}
		}
		ms := c.stack[base:] // nested objects pushed and popped theirs meanwhile
		if !c.alike(ms) {
			slices.SortFunc(ms, func(a, b member) int { return bytes.Compare(c.key(a), c.key(b)) })
		}
		first := len(c.members)
		c.members = append(c.members, ms...)
		c.stack = c.stack[:base]
		c.objs[o] = object{end: int32(i + 1), first: int32(first), n: int32(len(ms)), next: int32(len(c.objs))}
		return i + 1
	case '[':
		for i = skipWS(c.in, i+1); c.in[i] != ']'; i = skipWS(c.in, i) {
			i = skipWS(c.in, c.scan(i))
			if c.in[i] == ',' {
				i++
			}
		}
		return i + 1
	case '"':
		return stringEnd(c.in, i)
	default:
		return scalarEnd(c.in, i)
	}
}

// emit writes the canonical form of the value at i (no whitespace before it), whose first
// object, if it holds any, is objs[o]. It returns the offset just past the value and the
// index of the first object after it.
func (c *canon) emit(i, o int) (int, int) {
	switch c.in[i] {
	case '{':
		obj := c.objs[o]
		c.out = append(c.out, '{')
		for k, m := range c.members[obj.first : obj.first+obj.n] {
			if k > 0 {
				c.out = append(c.out, ',')
			}
			c.out = append(c.out, c.key(m)...)
			c.out = append(c.out, ':')
			c.emit(int(m.val), int(m.obj))
		}
		c.out = append(c.out, '}')
		return int(obj.end), int(obj.next)
	case '[':
		c.out = append(c.out, '[')
		for i = skipWS(c.in, i+1); c.in[i] != ']'; i = skipWS(c.in, i) {
			i, o = c.emit(i, o)
			i = skipWS(c.in, i)
			if c.in[i] == ',' {
				c.out = append(c.out, ',')
				i++
			}
		}
		c.out = append(c.out, ']')
		return i + 1, o
	case '"':
		end := stringEnd(c.in, i)
		c.out = append(c.out, c.in[i:end]...)
		return end, o
	default: // number, true, false, null
		end := scalarEnd(c.in, i)
		c.out = append(c.out, c.in[i:end]...)
		return end, o
	}
}

// alike reports whether two of members have names a parser may read as one (see
// CanonicalBody), and records the first exact duplicate.
func (c *canon) alike(members []member) bool {
	if len(members) < 2 {
		return false
	}
	if len(members) <= 16 && allPlain(c.in, members) {
		return c.alikePlain(members)
	}
	names := make([]string, len(members))
	folded := make([]string, len(members))
	for i, m := range members {
		names[i] = decodeName(c.key(m))
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
func allPlain(in []byte, members []member) bool {
	for _, m := range members {
		for _, b := range in[m.ks+1 : m.ke-1] {
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
			a, b := c.key(members[j]), c.key(members[i])
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
