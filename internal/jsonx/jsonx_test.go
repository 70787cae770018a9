package jsonx

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// duplicateMemberTokens is the json.Decoder walk DuplicateMember replaced: the reference
// it must agree with on every valid body.
func duplicateMemberTokens(body []byte) bool {
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
		name = strings.ToLower(strings.ToUpper(name))
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

var duplicateCases = []struct {
	body string
	dup  bool
}{
	{`{}`, false},
	{` { } `, false},
	{`{"status":"completed"}`, false},
	{`{"status":"processing","status":"not_found"}`, true},
	{`{"status":1,"STATUS":2}`, true},
	{`{"Status":1,"sTaTuS":2}`, true},
	{`{"ſtatus":1,"status":2}`, true},                   // U+017F folds with "s", as encoding/json matches
	{`{"\u0073tatus":1,"status":2}`, true},              // an escape is the name it stands for
	{`{"K":1,"k":2}`, true},                             // U+212A (Kelvin) folds with "k"
	{`{"a\"b":1,"a\"B":2}`, true},                       // an escaped quote inside a name
	{`{"a\\":1,"b":2}`, false},                          // an escaped backslash ends before the quote
	{`{"a":{"b":1,"b":2},"c":3}`, false},                // only the top level counts
	{`{"a":["}",{"a":1}],"b":"{\"a\":1}","a":0}`, true}, // brackets and quotes inside values skipped
	{`{"a":[1,2,{"x":[]}] , "b" : null , "c":true,"d":-1.5e3}`, false},
	{`{"a":-1.5e3,"A":false}`, true},
	{`[{"a":1,"a":2}]`, false}, // not an object
	{`"a"`, false},
	{`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18,"s":19,"A":20}`, true}, // past the first 16 names
	{`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18,"s":19,"t":20}`, false},
	{"{\"a\xff\":1,\"a\xfe\":2}", true}, // invalid UTF-8 decodes to U+FFFD in both names
}

func TestDuplicateMember(t *testing.T) {
	for _, tc := range duplicateCases {
		if !json.Valid([]byte(tc.body)) {
			t.Fatalf("case %s is not valid JSON", tc.body)
		}
		if got := DuplicateMember([]byte(tc.body)); got != tc.dup {
			t.Errorf("DuplicateMember(%s) = %v, want %v", tc.body, got, tc.dup)
		}
		if ref := duplicateMemberTokens([]byte(tc.body)); ref != tc.dup {
			t.Errorf("the Decoder walk says %v for %s, want %v", ref, tc.body, tc.dup)
		}
	}
}

// Bodies that are not JSON never panic and never report a duplicate they do not have past
// the point where they break.
func TestDuplicateMemberInvalid(t *testing.T) {
	for _, body := range []string{``, `{`, `{"a`, `{"a":`, `{"a":1`, `{"a":1,`, `{"a":[1,`, `{"a":"\`, `{"a" 1}`, `{1:2}`, `{"a":}`} {
		if DuplicateMember([]byte(body)) {
			t.Errorf("DuplicateMember(%q) = true", body)
		}
	}
}

func FuzzDuplicateMember(f *testing.F) {
	for _, tc := range duplicateCases {
		f.Add([]byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got := DuplicateMember(body) // never panics, valid or not
		if json.Valid(body) && got != duplicateMemberTokens(body) {
			t.Fatalf("DuplicateMember(%q) = %v, the Decoder walk says %v", body, got, !got)
		}
	})
}

func BenchmarkDuplicateMember(b *testing.B) {
	body := []byte(`{"status":"completed","response_status":201,"response_body":{"id":"pay_0193a7b2-58c1-7d3e-9f00-4a1b2c3d4e5f"}}`)
	b.Run("walk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			DuplicateMember(body)
		}
	})
	b.Run("decoder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			duplicateMemberTokens(body)
		}
	})
}
