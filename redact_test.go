package idem

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRedactFields(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"a": 1, "client_secret" :  "s" , "n":{"client_secret":{"z":[1,2]}}}`, `{"a": 1, "client_secret" :  null , "n":{"client_secret":null}}`},
		{`[{"client_secret":"q"},"client_secret"]`, `[{"client_secret":null},"client_secret"]`},
		{`{"x":"client_secret"}`, `{"x":"client_secret"}`},
		{`{"client\u005fsecret":"e"}`, `{"client\u005fsecret":null}`},
		{`not json "client_secret"`, ``}, // names a field, cannot be read: nothing stored
		{"\xEF\xBB\xBF" + `{"client_secret":"s"}`, ``},
		{`not json at all`, `not json at all`},
		{``, ``},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, string(redactFields([]byte(tt.in), []string{"client_secret"})), tt.in)
	}
	assert.Equal(t, `{"a":1}`, string(redactFields([]byte(`{"a":1}`), nil)))
}

func FuzzRedactFields(f *testing.F) {
	f.Add([]byte(`{"client_secret":"s","b":[{"client_secret":1}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		out := redactFields(body, []string{"client_secret"})
		if json.Valid(body) && !json.Valid(out) {
			t.Fatalf("redaction broke valid JSON: %q -> %q", body, out)
		}
	})
}
