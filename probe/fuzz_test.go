package probe

import (
	"strings"
	"testing"
)

// The probe reads whatever an API answers: error codes and ids never panic, and wrapped
// evidence never exceeds its width nor loses a word.
func FuzzAnswerParsing(f *testing.F) {
	for _, s := range []string{`{"error":"idempotency_key_reused"}`, `{"error":{"type":"idempotency_error","code":"x"}}`,
		`{"id":"pay_1"}`, `{"id":7}`, `[]`, `null`, `{"code":""}`, "not json", ""} {
		f.Add([]byte(s), 20)
	}
	f.Fuzz(func(t *testing.T, body []byte, width int) {
		for _, c := range errorCodes(body) {
			if c == "" {
				t.Errorf("empty code from %q", body)
			}
		}
		_ = answerID(answer{status: 201, body: body})
		if width < 1 || width > 200 {
			return
		}
		lines := wrap(string(body), width)
		for _, l := range lines {
			if len(l) > width {
				t.Errorf("line %q longer than %d", l, width)
			}
		}
		if got, want := strings.Join(strings.Fields(strings.Join(lines, "")), ""), strings.Join(strings.Fields(string(body)), ""); got != want {
			t.Errorf("wrap lost text: %q vs %q", got, want)
		}
	})
}
