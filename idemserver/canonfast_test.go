package idemserver

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// fullCanonical is canonicalize without the fast path: what every body got before it.
func fullCanonical(body []byte) canonical {
	if len(bytes.TrimSpace(body)) == 0 || !json.Valid(body) {
		return canonical{out: body}
	}
	return canonicalizeFull(body, &canonScratch{})
}

func TestCanonicalJSON(t *testing.T) {
	deep := strings.Repeat("[", maxFastDepth+1) + strings.Repeat("]", maxFastDepth+1)
	for _, tc := range []struct {
		in   string
		fast bool
	}{
		{`{"amount":1999,"currency":"eur","customer":"cus_9","description":"order 4711"}`, true},
		{`{"a":{"x":[1,{"p":null,"q":"s p"}],"y":true},"b":"}\"{"}`, true},
		{`[{"b":1},{"a":2}]`, true},
		{`"x y"`, true},
		{`-1.5e3`, true},
		{`{}`, true},
		{`{"a":1,"b":2,"B":3}`, false}, // "B" sorts before "b"
		{`{"a!":1,"a":2}`, true},       // '!' sorts before the closing quote
		{`{"a":2,"a!":1}`, false},
		{`{"a":1,"a":1}`, false},      // a duplicate
		{`{"\u0061":1,"b":2}`, false}, // an escaped name
		{"{\"\xc3\xa9\":1}", false},   // a name outside ASCII
		{`{"a": 1}`, false},           // whitespace
		{" {}", false},
		{deep, false},
		{`[1,-0.5e+7,0,true,false,null,"\u00e9\n"]`, true},
		// Invalid JSON is never taken for canonical: the full pass decides (not JSON).
		{``, false}, {`{"a":01}`, false}, {`[1,]`, false}, {`{"a":1,}`, false}, {`"\u12"`, false},
		{`-`, false}, {`1.`, false}, {`1e`, false}, {`{"a"}`, false}, {`tru`, false}, {`nul`, false},
		{`{"a":1}x`, false}, {`[1 2]`, false}, {"\"a\x01\"", false}, {`"\x"`, false}, {`{1:2}`, false},
		{`"abc`, false}, {`[`, false}, {`{"a":`, false}, {`+1`, false}, {`.5`, false},
		{strings.Repeat("[", maxFastDepth) + strings.Repeat("]", maxFastDepth), true},
	} {
		if got := canonicalJSON([]byte(tc.in)); got != tc.fast {
			t.Errorf("canonicalJSON(%q) = %v, want %v", tc.in, got, tc.fast)
		}
		checkFastPath(t, []byte(tc.in))
	}
}

// checkFastPath fails unless canonicalize (with the fast path) and fullCanonical agree on
// body: the same canonical form, kind and duplicate, so that no fingerprint changes.
func checkFastPath(t *testing.T, body []byte) {
	t.Helper()
	got, want := canonicalize(body), fullCanonical(body)
	if !bytes.Equal(got.out, want.out) || got.isJSON != want.isJSON || got.dup != want.dup || got.hasDup != want.hasDup {
		t.Fatalf("canonicalize(%q) = %q %v %q %v; the full pass gives %q %v %q %v",
			body, got.out, got.isJSON, got.dup, got.hasDup, want.out, want.isJSON, want.dup, want.hasDup)
	}
	if c, isJSON := CanonicalBody(body); isJSON && len(c) > 0 && &c[0] == &body[0] {
		t.Fatalf("CanonicalBody(%q) returned its input, not a copy", body)
	}
}

// FuzzCanonicalFastPath: for every input, the fast path for bodies already in canonical form
// gives exactly what the full pass gives (so every fingerprint is unchanged).
func FuzzCanonicalFastPath(f *testing.F) {
	for _, s := range []string{
		`{"amount":1999,"currency":"eur","customer":"cus_9s6XKzkNRiz8i3","description":"order 4711"}`,
		`{"a":{"x":[1,{"p":null,"q":"s p"}],"y":true},"b":"}\"{"}`,
		`{"A":1,"a":2}`, `{"a!":1,"a":2}`, `{"a":1,"a":2}`, `{"\u0061":1,"a":2}`, `{"a":1,"b":{}}`,
		"{\"\xff\":1,\"\xfe\":2}", `[[],{},"",0,true,null]`, `{"b":1,"a":2}`,
		`{"a":01}`, `[1,]`, `"\u12"`, `-0.5e+7`, `1.`, `{"a":1}x`, `"\ud800"`, "\"\xff\"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkFastPath(t, body) })
}
