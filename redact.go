package idem

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// redactStored is what a stored answer keeps of header and body when fields are to be
// redacted (Config.RedactFields): a gzip body (the caller asked for it with its own
// Accept-Encoding, so net/http left it compressed) is stored decompressed and redacted,
// without its Content-Encoding and Content-Length; a body in another encoding, which
// cannot be read here, is not stored at all. header may be the caller's: it is copied
// before a change.
func (c *Client) redactStored(header http.Header, body []byte) (http.Header, []byte) {
	if len(c.redact) == 0 || len(body) == 0 {
		return header, body
	}
	enc := strings.ToLower(strings.TrimSpace(header.Get("Content-Encoding")))
	if enc == "" || enc == "identity" {
		return header, redactFields(body, c.redact)
	}
	header = header.Clone()
	header.Del("Content-Encoding")
	header.Del("Content-Length")
	if enc != "gzip" && enc != "x-gzip" {
		return header, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return header, nil
	}
	limit := int64(maxStatusBody) + 6*c.policy.MaxResponseSize // as a status check's answer may be
	plain, err := io.ReadAll(io.LimitReader(zr, limit+1))
	if err != nil || int64(len(plain)) > limit {
		return header, nil
	}
	return header, redactFields(plain, c.redact)
}

// redactFields returns body with the value of every JSON object member named in fields, at
// any depth, replaced by null; everything else keeps its bytes (member order, spacing,
// numbers as written). A body that names none of the fields is returned as it is; one that
// names one but is not one well-formed JSON value gives nil: nothing of it is stored. Only stored copies are
// redacted (Config.RedactFields): the caller of Do gets the body as the server sent it.
func redactFields(body []byte, fields []string) []byte {
	if len(fields) == 0 || len(body) == 0 || !mentionsAny(body, fields) {
		return body
	}
	if !json.Valid(body) {
		// It names a field but is not one JSON value (a byte-order mark, trailing bytes):
		// nothing can say where the value is, so nothing of it is stored.
		return nil
	}
	type frame struct{ object, wantKey bool }
	var (
		stack []frame
		spans [][2]int64
	)
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	valueDone := func() { // a value ended: its object now expects a key
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].wantKey = true
		}
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return body // json.Valid said otherwise; keep the bytes rather than guess
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				if n := len(stack); n > 0 && stack[n-1].object {
					stack[n-1].wantKey = false
				}
				stack = append(stack, frame{object: d == '{', wantKey: d == '{'})
			default:
				stack = stack[:len(stack)-1]
				valueDone()
			}
			continue
		}
		n := len(stack)
		if n == 0 || !stack[n-1].object || !stack[n-1].wantKey {
			valueDone() // a scalar value
			continue
		}
		name, _ := tok.(string)
		stack[n-1].wantKey = false
		if !contains(fields, name) {
			continue
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return body
		}
		end := dec.InputOffset()
		spans = append(spans, [2]int64{end - int64(len(raw)), end})
		valueDone()
	}
	if len(spans) == 0 {
		return body
	}
	out := make([]byte, 0, len(body))
	var at int64
	for _, s := range spans {
		out = append(out, body[at:s[0]]...)
		out = append(out, "null"...)
		at = s[1]
	}
	return append(out, body[at:]...)
}

// mentionsAny is a cheap pre-check: a body whose bytes hold none of the names (as JSON
// strings) and no escape that could spell one ("client\u005fsecret") has no member to
// redact.
func mentionsAny(body []byte, fields []string) bool {
	if bytes.Contains(body, []byte(`\u`)) {
		return true
	}
	for _, f := range fields {
		if bytes.Contains(body, []byte(`"`+f+`"`)) {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
