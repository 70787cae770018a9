package idemserver

import "bytes"

// maxFastDepth bounds the nesting canonicalJSON follows; deeper documents take the full pass.
const maxFastDepth = 32

// canonicalJSON reports whether body is valid JSON (as json.Valid judges it) that is already
// its own canonical form, so that canonicalizeWith can hash it as it is, with no duplicate
// member, instead of validating it with encoding/json and building its tables: most clients
// send compact JSON with sorted members. It holds when the document has no whitespace outside
// strings and, in every object, every member name is plain (ASCII, no escape) and the names
// as written, quotes included, increase strictly in byte order: then the full pass emits each
// value verbatim and each object's members in the order they came (sorted, they stay where
// they are; found alike, they are kept in input order anyway), and plain names that all
// differ as written decode to names that all differ, so there is no duplicate to report.
// It only ever accepts: anything it does not recognise (whitespace, an escaped name, a
// document nested deeper than maxFastDepth, invalid JSON) is left to the full pass, which
// validates it. FuzzCanonicalFastPath holds the two to the same result for every input.
func canonicalJSON(body []byte) bool {
	p := fastScan{in: body}
	return p.value() && p.i == len(body)
}

// fastScan is canonicalJSON's cursor: i is the offset of the next byte to read.
type fastScan struct {
	in    []byte
	i     int
	depth int
}

// value reads one value at i.
func (p *fastScan) value() bool {
	if p.i >= len(p.in) {
		return false
	}
	switch c := p.in[p.i]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		_, ok := p.str()
		return ok
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	}
	return false
}

// next reports whether the byte at i is c, and if so steps past it.
func (p *fastScan) next(c byte) bool {
	if p.i < len(p.in) && p.in[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *fastScan) object() bool {
	if p.depth == maxFastDepth {
		return false
	}
	p.depth++
	p.i++ // '{'
	if p.next('}') {
		p.depth--
		return true
	}
	var prev []byte
	for {
		start := p.i
		if p.i >= len(p.in) || p.in[p.i] != '"' {
			return false
		}
		plain, ok := p.str()
		if !ok || !plain {
			return false
		}
		name := p.in[start:p.i]
		if prev != nil && bytes.Compare(prev, name) >= 0 {
			return false
		}
		prev = name
		if !p.next(':') || !p.value() {
			return false
		}
		if p.next('}') {
			p.depth--
			return true
		}
		if !p.next(',') {
			return false
		}
	}
}

func (p *fastScan) array() bool {
	if p.depth == maxFastDepth {
		return false
	}
	p.depth++
	p.i++ // '['
	if p.next(']') {
		p.depth--
		return true
	}
	for {
		if !p.value() {
			return false
		}
		if p.next(']') {
			p.depth--
			return true
		}
		if !p.next(',') {
			return false
		}
	}
}

// str reads a string (i at its quote); plain reports that it is ASCII without escapes.
func (p *fastScan) str() (plain, ok bool) {
	plain = true
	for p.i++; p.i < len(p.in); {
		switch c := p.in[p.i]; {
		case c == '"':
			p.i++
			return plain, true
		case c < 0x20:
			return false, false
		case c == '\\':
			plain = false
			if p.i+1 >= len(p.in) {
				return false, false
			}
			switch p.in[p.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i += 2
			case 'u':
				if p.i+6 > len(p.in) {
					return false, false
				}
				for _, h := range p.in[p.i+2 : p.i+6] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return false, false
					}
				}
				p.i += 6
			default:
				return false, false
			}
		default:
			if c >= 0x80 {
				plain = false
			}
			p.i++
		}
	}
	return false, false
}

// number reads a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *fastScan) number() bool {
	p.next('-')
	switch {
	case p.next('0'):
	case p.digits() == 0:
		return false
	}
	if p.next('.') && p.digits() == 0 {
		return false
	}
	if p.next('e') || p.next('E') {
		if !p.next('+') {
			p.next('-')
		}
		if p.digits() == 0 {
			return false
		}
	}
	return true
}

// digits steps past the digits at i and returns how many there were.
func (p *fastScan) digits() int {
	start := p.i
	for p.i < len(p.in) && '0' <= p.in[p.i] && p.in[p.i] <= '9' {
		p.i++
	}
	return p.i - start
}

func (p *fastScan) literal(lit string) bool {
	if !bytes.HasPrefix(p.in[p.i:], []byte(lit)) {
		return false
	}
	p.i += len(lit)
	return true
}
