// Package jsonx holds JSON checks shared by idem and its outcome package.
package jsonx

import (
	"bytes"
	"encoding/json"
	"strings"
)

// DuplicateMember reports whether body's top-level object names a member twice, letter case
// aside (encoding/json matches names that way and keeps the last): {"status":"processing",
// "status":"not_found"} must not be read as either, since parsers disagree on which counts.
// Called on a body json.Unmarshal accepted.
func DuplicateMember(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return false
	}
	seen := make(map[string]bool, 4)
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return false
		}
		name, _ := t.(string)
		name = strings.ToLower(strings.ToUpper(name)) // folds "ſ" with "s", as encoding/json does
		if seen[name] {
			return true
		}
		seen[name] = true
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return false
		}
	}
	return false
}
