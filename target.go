package idem

import (
	"net/url"
	"strings"
)

// Where an operation is sent: its URL resolved against Config.BaseURL, as the fingerprint
// hashes it.

// target normalises an operation URL for the fingerprint, so that one request written two
// ways is one fingerprint and two requests that differ on the wire never share one. It
// resolves the URL as resolveURL does, lower-cases scheme and host, drops the fragment
// (never sent) and an empty query, and gives an empty path "/". A result under
// Config.BaseURL loses the base (so "/v1/payments", "v1/payments" and the absolute URL are
// one request); any other keeps its scheme and host (another host, or a path beside the
// base's, is another request). An already normal relative URL ("/v1/payments?x=1") is
// returned unchanged, so its fingerprint never changes. Path and query bytes are kept as
// written: no unescaping, no dot segments resolved. A URL that can never be sent is
// returned as written (resolveURL refuses it before any record exists).
func (c *Client) target(ref string) string {
	if c.base != nil && normalRelative(ref) {
		return ref // what the resolution below gives back for it, without parsing
	}
	return c.resolveTarget(ref)
}

// plainPath reports whether ref is a normal relative URL (normalRelative) that url.Parse
// accepts as a relative URL without user info and that check accepts: no percent-escape to
// check, no control byte, no space. FuzzPlainPath holds it to url.Parse.
func plainPath(ref string) bool {
	if !normalRelative(ref) {
		return false
	}
	for i := 0; i < len(ref); i++ {
		if c := ref[i]; c <= ' ' || c == 0x7f || c == '%' {
			return false
		}
	}
	return true
}

// normalRelative reports whether ref is a relative URL that target returns as written: one
// leading slash (two would name a host), no fragment, no empty query.
func normalRelative(ref string) bool {
	return len(ref) > 0 && ref[0] == '/' && (len(ref) == 1 || ref[1] != '/') &&
		strings.IndexByte(ref, '#') < 0 && !strings.HasSuffix(ref, "?")
}

// resolveTarget is target without the shortcut for a normal relative URL.
func (c *Client) resolveTarget(ref string) string {
	wire := ref
	u, err := url.Parse(ref)
	switch {
	case err != nil:
		return ref
	case !u.IsAbs():
		if c.base == nil {
			return ref
		}
		wire = c.baseStr + "/" + strings.TrimLeft(ref, "/")
	case u.Host == "":
		return ref
	}
	wire, _, _ = strings.Cut(wire, "#")
	if p, q, _ := strings.Cut(wire, "?"); q == "" {
		wire = p
	}
	origin, rest := splitOrigin(wire)
	if rest == "" || rest[0] == '?' {
		rest = "/" + rest
	}
	if c.base != nil {
		bo, bp := splitOrigin(c.baseStr)
		if origin == bo && strings.HasPrefix(rest, bp+"/") {
			return rest[len(bp):]
		}
	}
	return origin + rest
}

// splitOrigin splits an absolute URL with an authority into its lower-cased
// "scheme://host[:port]" and the rest as written.
func splitOrigin(s string) (origin, rest string) {
	i := strings.Index(s, "://") + 3
	j := strings.IndexAny(s[i:], "/?")
	if j < 0 {
		j = len(s) - i
	}
	return strings.ToLower(s[:i+j]), s[i+j:]
}
