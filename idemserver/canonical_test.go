package idemserver

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

func TestCanonicalBody(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"b":1,"a":2}`, `j{"a":2,"b":1}`},
		{" { \"b\" : [ 1 , {\"y\":null,\"x\":true} ] ,\n\"a\":\"s p\\\"}\" } ", `j{"a":"s p\"}","b":[1,{"x":true,"y":null}]}`},
		{`[]`, `j[]`},
		{`{}`, `j{}`},
		{`[ ]`, `j[]`},
		{`{"a":1,"a":0}`, `j{"a":1,"a":0}`},
		{`-1.5e3`, `j-1.5e3`},
		{`"x"`, `j"x"`},
		{`not json`, `not json`},
		{``, ``},
		{`{"a":1`, `{"a":1`},
	} {
		got, isJSON := CanonicalBody([]byte(tc.in))
		want, wantJSON := strings.CutPrefix(tc.want, "j")
		if string(got) != want || isJSON != wantJSON {
			t.Errorf("CanonicalBody(%q) = %q, %v; want %q, %v", tc.in, got, isJSON, want, wantJSON)
		}
	}
}

func TestFingerprintParts(t *testing.T) {
	base := Fingerprint("POST", "POST /v1/payments", []byte(`{"a":1,"b":2}`))
	if !bytes.Equal(base, Fingerprint("POST", "POST /v1/payments", []byte("{\"b\":2,\n\"a\":1}"))) {
		t.Fatal("key order or whitespace changed the fingerprint")
	}
	for _, other := range [][]byte{
		Fingerprint("PUT", "POST /v1/payments", []byte(`{"a":1,"b":2}`)),
		Fingerprint("POST", "POST /v1/refunds", []byte(`{"a":1,"b":2}`)),
		Fingerprint("POST", "POST /v1/payments", []byte(`{"a":1,"b":3}`)),
		Fingerprint("POST", "POST /v1/payments", []byte(`j{"a":1,"b":2}`)),
	} {
		if bytes.Equal(base, other) {
			t.Fatal("different requests share a fingerprint")
		}
	}
}

// decodeNumbers unmarshals with numbers as their text, so that valid JSON out of float64
// range (1E700) decodes.
func decodeNumbers(b []byte, v *any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

// FuzzCanonicalBody: the canonical form of valid JSON is valid JSON equal in value to the
// input (after the 'j' marker), canonicalising is idempotent, and the form is byte for byte
// the reference implementation's (fingerprints stored before must still match).
func FuzzCanonicalBody(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1,2,{"d":"x","c":null}]}`, `[]`, `"\u00e9"`, `1e5`, `{"a":{"a":{}}}`, `nope`,
		`{"B":[{"z":1,"y":[2,{"x":{}}]}],"a":{"c":" ","b":"\u0041"},"A":0}`, `[[[{"b":{"d":1,"c":2},"a":[]}]]]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, isJSON := CanonicalBody(in)
		if ref, refJSON := referenceCanonical(in); !bytes.Equal(out, ref) || isJSON != refJSON {
			t.Fatalf("CanonicalBody(%q) = %q, %v; the reference gives %q, %v", in, out, isJSON, ref, refJSON)
		}
		if !json.Valid(in) || len(bytes.TrimSpace(in)) == 0 {
			if !bytes.Equal(out, in) || isJSON {
				t.Fatalf("non-JSON body changed: %q -> %q %v", in, out, isJSON)
			}
			return
		}
		if !isJSON || !json.Valid(out) {
			t.Fatalf("CanonicalBody(%q) = %q, %v: not valid JSON", in, out, isJSON)
		}
		var a, b any
		if decodeNumbers(in, &a) != nil || decodeNumbers(out, &b) != nil {
			t.Fatal("unmarshal")
		}
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if !bytes.Equal(ja, jb) {
			t.Fatalf("value changed: %s vs %s", ja, jb)
		}
		if again, _ := CanonicalBody(out); !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q -> %q", out, again)
		}
	})
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`abc`, `"a\"b"`, `"unterminated`, ``, `"\x"`, ` k `} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		k, err := ParseKey(v)
		if err != nil {
			return
		}
		if k == "" || len(k) > MaxKeyLength {
			t.Fatalf("ParseKey(%q) = %q", v, k)
		}
		for i := 0; i < len(k); i++ {
			if k[i] < 0x20 || k[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q: byte 0x%02x", v, k, k[i])
			}
		}
	})
}

// Member names that one JSON parser or another reads as the same name (escapes, Go's case
// folding) keep their input order: two bodies a parser reads differently never share a
// canonical form. Objects without such names are sorted byte-wise, as before (persisted
// fingerprints stay valid).
func TestCanonicalBodyNameVariants(t *testing.T) {
	for _, pair := range [][2]string{
		{`{"amount":1,"amount":2}`, `{"amount":2}`},
		{`{"amount":1,"amount":2}`, `{"amount":2,"amount":1}`},
		{`{"amount":1,"\u0061mount":2}`, `{"\u0061mount":2,"amount":1}`},
		{`{"amount":1,"Amount":2}`, `{"Amount":2,"amount":1}`},
		{`{"kind":1,"\u212aind":2}`, `{"\u212aind":2,"kind":1}`}, // Kelvin sign folds to k
		{`{"status":1,"ſtatus":2}`, `{"ſtatus":2,"status":1}`},   // long s folds to s
		{`{"a":{"x":1,"X":2}}`, `{"a":{"X":2,"x":1}}`},
		{"{\"\xff\":1,\"\xfe\":2}", "{\"\xfe\":2,\"\xff\":1}"}, // both decode to U+FFFD
	} {
		a, _ := CanonicalBody([]byte(pair[0]))
		b, _ := CanonicalBody([]byte(pair[1]))
		if bytes.Equal(a, b) {
			t.Errorf("%s and %s share the canonical form %s", pair[0], pair[1], a)
		}
		if !bytes.Equal(Fingerprint("POST", "POST /pay", []byte(pair[0])), Fingerprint("POST", "POST /pay", []byte(pair[0]))) {
			t.Fatal("fingerprint not deterministic")
		}
	}
	for in, want := range map[string]string{
		`{"b":1,"A":2,"c":{"d":1,"C":2}}`: `{"A":2,"b":1,"c":{"C":2,"d":1}}`, // byte order, as before
		`{"b":1,"a":2,"B":3}`:             `{"b":1,"a":2,"B":3}`,             // input order
		`{"a":1, "\u0061":2}`:             `{"a":1,"\u0061":2}`,
	} {
		if got, _ := CanonicalBody([]byte(in)); string(got) != want {
			t.Errorf("CanonicalBody(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestDuplicateMember(t *testing.T) {
	for in, want := range map[string]string{
		`{"amount":1,"amount":2}`:           "amount",
		`{"amount":1,"\u0061mount":2}`:      "amount",
		`[{"a":{"b":1,"c":{"x":0,"x":1}}}]`: "x",
		`{"amount":1,"Amount":2}`:           "",
		`{"a":1,"b":{"a":2}}`:               "",
		`{"a":1,"a":2`:                      "", // not JSON
		`"{\"a\":1,\"a\":2}"`:               "",
		``:                                  "",
	} {
		got, dup := duplicateMember([]byte(in))
		if got != want || dup != (want != "") {
			t.Errorf("duplicateMember(%s) = %q, %v; want %q", in, got, dup, want)
		}
	}
}

// Each member's value was built apart and copied into its object, so a byte was copied once
// per enclosing object: a 1 MiB body nested 9,999 deep took 14 s and 9.6 GB, before the claim,
// for any caller with a key (adversarial run). The first linear rewrite then spent 68 times a
// body of empty objects on its tables (a growing slice of wide records, adversarial run).
// Canonicalising allocates a small multiple of the body, whatever its shape.
func TestCanonicalBodyAllocatesASmallMultipleOfTheBody(t *testing.T) {
	const size = 1 << 20
	nested := func(open, shut string) func() []byte {
		return func() []byte {
			const depth = 9999
			inner := `"` + strings.Repeat("x", size-len(open)*depth-len(shut)*depth-2) + `"`
			return []byte(strings.Repeat(open, depth) + inner + strings.Repeat(shut, depth))
		}
	}
	wide := func(elem string) func() []byte {
		return func() []byte {
			n := (size - 2) / (len(elem) + 1)
			return []byte("[" + strings.TrimSuffix(strings.Repeat(elem+",", n), ",") + "]")
		}
	}
	for _, tc := range []struct {
		name string
		body func() []byte
	}{
		{"nested, one member a level", nested(`{"a":`, `}`)},
		{"nested, sorted at every level", nested(`{"b":1,"a":`, `}`)},
		{"nested arrays", nested(`[0,`, `]`)},
		{"empty objects", wide(`{}`)},
		{"one-member objects", wide(`{"a":0}`)},
		{"two-member objects, sorted", wide(`{"b":0,"a":0}`)},
		{"numbers", wide(`0`)},
		{"a string of braces and colons", func() []byte { return []byte(`"` + strings.Repeat("{:", size/2-1) + `"`) }},
	} {
		body := tc.body()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		out, isJSON := CanonicalBody(body)
		runtime.ReadMemStats(&after)
		if !isJSON || len(out) > len(body) {
			t.Fatalf("%s: not canonicalised (%v, %d bytes)", tc.name, isJSON, len(out))
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8*uint64(len(body)) {
			t.Errorf("%s: %d bytes allocated for a %d-byte body (%.1fx)", tc.name, alloc, len(body), float64(alloc)/float64(len(body)))
		}
	}
}
