package idemserver

import (
	"bytes"
	"encoding/json"
	"slices"
)

// referenceCanonical is CanonicalBody as it was first written, one recursive pass that builds
// each member's value apart (a byte copied once per enclosing object): kept as the reference
// the two-pass canon must match byte for byte, since a changed canonical form would change
// every stored fingerprint.
func referenceCanonical(body []byte) ([]byte, bool) {
	if len(bytes.TrimSpace(body)) == 0 || !json.Valid(body) {
		return body, false
	}
	r := refCanon{canon: canon{in: body}}
	r.value()
	return r.out, true
}

// refCanon keeps the reference's own cursor; it borrows canon's alike, so that both
// implementations decide sorting by the same rule.
type refCanon struct {
	canon
	pos int
}

type refMember struct {
	key, value []byte
	ks, ke     int
}

func (c *refCanon) ws() { c.pos = skipWS(c.in, c.pos) }

func (c *refCanon) stringEnd() int {
	c.pos = stringEnd(c.in, c.pos)
	return c.pos
}

func (c *refCanon) scalarEnd() int {
	c.pos = scalarEnd(c.in, c.pos)
	return c.pos
}

func (c *refCanon) value() {
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
			c.out = append(c.out, b)
			if b == ']' {
				return
			}
		}
	case '"':
		c.out = append(c.out, c.in[c.pos:c.stringEnd()]...)
	default:
		start := c.pos
		c.out = append(c.out, c.in[start:c.scalarEnd()]...)
	}
}

func (c *refCanon) object() {
	c.pos++
	var members []refMember
	for {
		c.ws()
		if c.in[c.pos] == '}' {
			c.pos++
			break
		}
		start := c.pos
		key := c.in[start:c.stringEnd()]
		end := c.pos
		c.ws()
		c.pos++
		saved := c.out
		c.out = nil
		c.value()
		members = append(members, refMember{key: key, value: c.out, ks: start, ke: end})
		c.out = saved
		c.ws()
		if c.in[c.pos] == ',' {
			c.pos++
		}
	}
	keys := make([]member, len(members))
	for i, m := range members {
		keys[i] = member{ks: int32(m.ks), ke: int32(m.ke)}
	}
	if !c.alike(keys) {
		slices.SortFunc(members, func(a, b refMember) int { return bytes.Compare(a.key, b.key) })
	}
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
