package profile

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
)

// Matches reports whether an answer (status, header, body) meets every condition of r. A 2xx
// answer never matches a rule without a Status or a range: rules speak of conflicts and
// errors.
func (r Rule) Matches(status int, header http.Header, body []byte) bool {
	switch {
	case r.Status != 0:
		if status != r.Status {
			return false
		}
	case r.MinStatus != 0 || r.MaxStatus != 0:
		if status < r.MinStatus || status > r.MaxStatus {
			return false
		}
	default:
		if status == 0 || status/100 == 2 {
			return false
		}
	}
	if r.Header != "" {
		got := strings.TrimSpace(header.Get(r.Header))
		if !strings.EqualFold(got, r.HeaderValue) {
			return false
		}
	}
	if r.Field != "" {
		found := false
		each(body, r.Field, func(v string) bool { found = v == r.Value; return found })
		if !found {
			return false
		}
	}
	return true
}

// Value returns the first value at the dotted path in a JSON body (a string's text, or a
// number or boolean as written), trying every element of an array met on the way; ok is
// false when there is none, or the body is not JSON.
func Value(body []byte, path string) (v string, ok bool) {
	each(body, path, func(s string) bool { v, ok = s, true; return true })
	return v, ok
}

// each calls f with every scalar at path until f returns true.
func each(body []byte, path string, f func(string) bool) bool {
	if len(body) == 0 || path == "" {
		return false
	}
	var root any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if dec.Decode(&root) != nil {
		return false
	}
	return walk(root, strings.Split(path, "."), f)
}

func walk(node any, path []string, f func(string) bool) bool {
	if arr, ok := node.([]any); ok {
		for _, el := range arr {
			if walk(el, path, f) {
				return true
			}
		}
		return false
	}
	if len(path) == 0 {
		switch v := node.(type) {
		case string:
			return f(v)
		case json.Number:
			return f(v.String())
		case bool:
			if v {
				return f("true")
			}
			return f("false")
		}
		return false
	}
	obj, ok := node.(map[string]any)
	if !ok {
		return false
	}
	child, ok := obj[path[0]]
	return ok && walk(child, path[1:], f)
}
