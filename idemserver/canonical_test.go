package idemserver

import (
	"bytes"
	"encoding/json"
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

// FuzzCanonicalBody: the canonical form of valid JSON is valid JSON equal in value to the
// input (after the 'j' marker), and canonicalising is idempotent.
func FuzzCanonicalBody(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1,2,{"d":"x","c":null}]}`, `[]`, `"\u00e9"`, `1e5`, `{"a":{"a":{}}}`, `nope`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, isJSON := CanonicalBody(in)
		if !json.Valid(in) || len(bytes.TrimSpace(in)) == 0 {
			if !bytes.Equal(out, in) || isJSON {
				t.Fatalf("non-JSON body changed: %q -> %q %v", in, out, isJSON)
			}
			return
		}
		if !isJSON || !json.Valid(out) {
			t.Fatalf("CanonicalBody(%q) = %q, %v: not valid JSON", in, out, isJSON)
		}
		// UseNumber: numbers are compared as written; 1E700 is valid JSON but no float64.
		a, errA := decodeNumbers(in)
		b, errB := decodeNumbers(out)
		if errA != nil || errB != nil {
			t.Fatalf("unmarshal: %v, %v", errA, errB)
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

func decodeNumbers(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}
