package idemserver

import (
	"bytes"
	"encoding/json"
	"slices"
)

// CanonicalBody returns body in the form the fingerprint hashes: a body that is valid JSON
// has its insignificant whitespace removed and the members of every object sorted by their
// key (stably, so duplicate keys keep their order); strings and numbers keep their exact text,
// so "A" and "\u0041", or 1 and 1.0, differ; isJSON is true. Any other body is returned
// unchanged, byte for byte, with isJSON false.
func CanonicalBody(body []byte) (canonical []byte, isJSON bool) {
	if len(bytes.TrimSpace(body)) == 0 || !json.Valid(body) {
		return body, false
	}
	c := canon{in: body, out: make([]byte, 0, len(body))}
	c.value()
	return c.out, true
}

// canon re-encodes a document json.Valid accepted; it trusts that validation.
type canon struct {
	in  []byte
	pos int
	out []byte
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

// value copies one value at c.pos to c.out.
func (c *canon) value() {
	c.ws()
	switch c.in[c.pos] {
	case '{':
		c.object()
	case '[':
		c.out = append(c.out, '[')
		c.pos++
		c.ws()
		if c.in[c.pos] == ']' {
			c.pos++
			c.out = append(c.out, ']')
			return
		}
		for {
			c.value()
			c.ws()
			b := c.in[c.pos]
			c.pos++
			c.out = append(c.out, b) // ',' or ']'
			if b == ']' {
				return
			}
		}
	case '"':
		c.out = append(c.out, c.in[c.pos:c.stringEnd()]...)
	default: // number, true, false, null
		start := c.pos
		for c.pos < len(c.in) && !bytes.ContainsRune([]byte(" \t\r\n,]}"), rune(c.in[c.pos])) {
			c.pos++
		}
		c.out = append(c.out, c.in[start:c.pos]...)
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

type member struct{ key, value []byte }

func (c *canon) object() {
	c.pos++ // '{'
	var members []member
	for {
		c.ws()
		if c.in[c.pos] == '}' {
			c.pos++
			break
		}
		start := c.pos
		key := c.in[start:c.stringEnd()]
		c.ws()
		c.pos++ // ':'
		saved := c.out
		c.out = nil
		c.value()
		members = append(members, member{key: key, value: c.out})
		c.out = saved
		c.ws()
		if c.in[c.pos] == ',' {
			c.pos++
		}
	}
	slices.SortStableFunc(members, func(a, b member) int { return bytes.Compare(a.key, b.key) })
	c.out = append(c.out, '{')
	for i, m := range members {
		if i > 0 {
			c.out = append(c.out, ',')
		}
		c.out = append(c.out, m.key...)
		c.out = append(c.out, ':')
		c.out = append(c.out, m.value...)
	}
	c.out = append(c.out, '}')
}
