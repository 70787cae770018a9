package idemserver

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// advNames are member names chosen to sit near the fast path's edges: case variants (alike
// for the full pass), prefixes ("a" and "a!", "a " sort around the closing quote), escapes
// that decode to a plain name, names outside ASCII, and a Kelvin sign that folds to "k".
var advNames = []string{
	`a`, `A`, `a!`, `a `, `a#`, `ab`, `b`, `B`, `k`, `K`, `s`, `_`, `~`, ``, ` `, `0`,
	`amount`, `Amount`, `amounT`, `\u0061`, `\u0041`, `\/`, `/`, `\"`, `\\`, "\u212a", "\u017f",
	`é`, "\xff", `\ud800`, `a\u0000`, `\n`, "\x7f",
}

// advScalars are values whose text the canonical form must keep exactly.
var advScalars = []string{
	`0`, `-0`, `1`, `1.0`, `1e2`, `1E2`, `1e+2`, `1e-2`, `-0.0`, `1e400`, `-1e-400`,
	`123456789012345678901234567890`, `0.1`, `true`, `false`, `null`, `""`, `"A"`, `"\u0041"`,
	`"\/"`, `"/"`, `"\ud83d\ude00"`, `"😀"`, "\"\xff\xfe\"", `"\ud800"`, `"}\"{"`, `" , : "`,
	`[]`, `{}`,
}

// advDoc writes a random compact document into b: names sorted by their bytes when sorted,
// else in the order drawn (duplicates possible either way).
func advDoc(r *rand.Rand, b *bytes.Buffer, depth int, sorted bool) {
	switch k := r.IntN(6); {
	case depth > 4 || k < 2:
		b.WriteString(advScalars[r.IntN(len(advScalars))])
	case k < 4:
		b.WriteByte('[')
		for i := range r.IntN(4) {
			if i > 0 {
				b.WriteByte(',')
			}
			advDoc(r, b, depth+1, sorted)
		}
		b.WriteByte(']')
	default:
		n := r.IntN(5)
		if r.IntN(8) == 0 {
			n = 17 + r.IntN(4) // over alike's 16-member small-object path
		}
		names := make([]string, n)
		for i := range names {
			names[i] = `"` + advNames[r.IntN(len(advNames))] + `"`
			if n > 16 {
				names[i] = `"` + advNames[r.IntN(len(advNames))] + string(rune('a'+i)) + `"`
			}
		}
		if sorted {
			slices.Sort(names)
			names = slices.Compact(names)
		}
		b.WriteByte('{')
		for i, name := range names {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(name)
			b.WriteByte(':')
			advDoc(r, b, depth+1, sorted)
		}
		b.WriteByte('}')
	}
}

// TestCanonicalDifferential is a differential test of the canonical fast path over
// generated documents (compact, sorted or not, with the names and numbers where a fast path
// most easily goes wrong): for each, and for the same document indented, canonicalize must
// give what the full pass and the original reference implementation give, and an indented
// copy of a fast-path body must canonicalise to that body (a genuine retry sent pretty-printed
// is replayed, not refused with 422). It held: no difference found.
func TestCanonicalDifferential(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	fast := 0
	var b, ind bytes.Buffer
	for i := range 5000 {
		b.Reset()
		advDoc(r, &b, 0, i%4 != 0)
		body := bytes.Clone(b.Bytes())
		checkCanonAgrees(t, body)
		if canonicalJSON(body) {
			fast++
			ind.Reset()
			if json.Indent(&ind, body, "", "  ") == nil {
				got := canonicalize(ind.Bytes())
				if !got.isJSON || !bytes.Equal(got.out, body) {
					t.Fatalf("indented %q canonicalises to %q, the compact body is its own form", body, got.out)
				}
			}
		}
	}
	if fast < 500 {
		t.Fatalf("only %d of 5000 documents took the fast path: the test does not exercise it", fast)
	}
}

// checkCanonAgrees compares canonicalize with the full pass and with referenceCanonical.
func checkCanonAgrees(t *testing.T, body []byte) {
	t.Helper()
	checkFastPath(t, body)
	got := canonicalize(body)
	ref, refJSON := referenceCanonical(body)
	if !bytes.Equal(got.out, ref) || got.isJSON != refJSON {
		t.Fatalf("canonicalize(%q) = %q %v; the reference gives %q %v", body, got.out, got.isJSON, ref, refJSON)
	}
	if got.isJSON != json.Valid(body) {
		t.Fatalf("canonicalize(%q) isJSON %v, json.Valid %v", body, got.isJSON, json.Valid(body))
	}
}

// TestCanonicalEdges runs hand-picked bodies at the fast path's edges through the same
// comparison: numbers (1.0 vs 1, 1e2, -0, huge exponents, leading zeros), escapes (\u0041,
// \/, surrogates, invalid UTF-8), duplicates, names around the closing quote, empty and
// non-JSON bodies, a BOM, NUL, trailing bytes. It held.
func TestCanonicalEdges(t *testing.T) {
	bodies := []string{
		``, ` `, `x`, "\xef\xbb\xbf{}", "{}\x00", `{}{}`, `{} `, `[1]]`, `00`, `-00`, `01`, `1.e5`,
		`1e999999999999`, `-0`, `{"a":-0}`, `{"a":1.0}`, `{"a":1}`, `{"a":1E2}`, `{"a":1e+02}`,
		`{"a":"\u0041"}`, `{"a":"A"}`, `{"\u0041":1}`, `{"A":1}`, `{"a":"\/"}`, `{"a":"/"}`,
		`{"a":"\ud83d\ude00"}`, `{"a":"\udE00\ud83d"}`, "{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\xff\"}",
		`{"a":1,"a":1}`, `{"a":1,"a":2}`, `{"a":1,"A":1}`, `{"A":1,"a":1}`, `{"a":{"b":1,"b":1}}`,
		`{"a":[{"b":1},{"b":1,"b":2}]}`, `{"a":1,"a!":1}`, `{"a!":1,"a":1}`, `{"a":1,"a ":1}`,
		`{"a ":1,"a":1}`, `{"":1,"a":2}`, `{"a":2,"":1}`, `{"\"":1,"a":2}`, `{"k":1,"\u212a":2}`,
		"{\"k\":1,\"\u212a\":2}", "{\"\u212a\":2,\"k\":1}", `{"a":1,"b":2,"c":{"d":[1,2,{"e":null}]}}`,
		"{\"a\":\"\t\"}", `{"a":"` + strings.Repeat(`\\`, 3) + `"}`, `"\u00"`, `"\uZZZZ"`, `"\a"`,
		`[` + strings.Repeat(`{"a":`, 40) + `1` + strings.Repeat(`}`, 40) + `]`,
		strings.Repeat(`[`, 33) + strings.Repeat(`]`, 33), strings.Repeat(`[`, 32) + strings.Repeat(`]`, 32),
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"Q":18}`,
		`{"Q":18,"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17}`,
	}
	for _, s := range bodies {
		checkCanonAgrees(t, []byte(s))
	}
	// Every prefix of a fast-path body (truncated uploads): no panic, the same answer.
	whole := `{"a":[1,-0.5e+7,{"b":"\u00e9\ud83d\ude00\/","c":null}],"d":true,"e":"x"}`
	if !canonicalJSON([]byte(whole)) {
		t.Fatalf("%s is not on the fast path", whole)
	}
	for i := range len(whole) {
		checkCanonAgrees(t, []byte(whole[:i]))
	}
	// Different payloads never share a fingerprint, on the fast path or off it.
	distinct := []string{`{"a":1}`, `{"a":1.0}`, `{"a":1e0}`, `{"a":-0}`, `{"a":0}`, `{"a":"A"}`, `{"a":"\u0041"}`,
		`{"a":"/"}`, `{"a":"\/"}`, `{"A":1}`, `{"a":1,"b":1}`, `[{"a":1}]`, `{"a":[1]}`, `"{\"a\":1}"`, `{"a":10}`}
	seen := map[string]string{}
	for _, s := range distinct {
		fp := string(Fingerprint("POST", "POST /v1/payments", []byte(s)))
		if prev, ok := seen[fp]; ok {
			t.Fatalf("%s and %s share a fingerprint", prev, s)
		}
		seen[fp] = s
	}
}

// FuzzCanonicalReference holds canonicalize (fast path included) to referenceCanonical,
// the original one-pass implementation, rather than to the full pass it shares code with.
func FuzzCanonicalReference(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	var b bytes.Buffer
	for range 64 {
		b.Reset()
		advDoc(r, &b, 0, true)
		f.Add(bytes.Clone(b.Bytes()))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkCanonAgrees(t, body) })
}
