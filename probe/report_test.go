package probe

import (
	"bytes"
	"strings"
	"testing"
)

// The table fits the width asked, wrapping long evidence (and cutting a word longer than a
// line) without losing any of it.
func TestWriteTextWidth(t *testing.T) {
	long := strings.Repeat("x", 150)
	rep := &Report{Target: "http://sandbox/v1/payments", Rows: []Row{
		{Check: CheckReplay, Result: Broken, Evidence: "HTTP 201 with another body " + long + " executed again?"},
		{Check: CheckCreate, Result: Honoured, Evidence: "HTTP 201"},
	}, Suggestion: Suggestion{BaseURL: "http://sandbox", KeyHeader: "Idempotency-Key", Notes: []string{strings.Repeat("word ", 40)}}}
	for _, width := range []int{60, 80, 100} {
		var b bytes.Buffer
		if err := rep.WriteText(&b, width); err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(b.String(), "\n") {
			if len(l) > width {
				t.Errorf("width %d: line of %d: %q", width, len(l), l)
			}
		}
		if got := strings.Count(strings.ReplaceAll(b.String(), "\n", ""), "x"); got < 150 {
			t.Errorf("width %d: %d of 150 x kept", width, got)
		}
		if !strings.Contains(b.String(), "KeyStatusURL: (none)") {
			t.Errorf("no KeyStatusURL line:\n%s", b.String())
		}
	}
}

func TestWrap(t *testing.T) {
	for _, tc := range []struct {
		in    string
		width int
		want  []string
	}{
		{"", 10, []string{""}},
		{"a b c", 10, []string{"a b c"}},
		{"aaaa bbbb cccc", 9, []string{"aaaa bbbb", "cccc"}},
		{"abcdefghij", 4, []string{"abcd", "efgh", "ij"}},
	} {
		got := wrap(tc.in, tc.width)
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("wrap(%q, %d) = %q, want %q", tc.in, tc.width, got, tc.want)
		}
	}
}
