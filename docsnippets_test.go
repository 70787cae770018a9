package idem

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fromMarker names the compiled Go file a documentation snippet is quoted from.
var fromMarker = regexp.MustCompile(`^<!-- from (\S+\.go) -->$`)

// TestDocSnippetsCompile: every ```go block in README.md and docs/*.md is preceded by
// `<!-- from PATH -->` and is a contiguous excerpt of PATH, a Go file of this repository that
// the build and the tests compile (an Example, a test's helper, an example program). Lines
// are compared with their indentation and runs of spaces collapsed, so gofmt's alignment of
// comments does not count; blank lines are skipped. Quoting compiled code this way keeps
// every snippet building without a build of its own.
func TestDocSnippetsCompile(t *testing.T) {
	pages, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	pages = append([]string{"README.md"}, pages...)
	blocks := 0
	for _, page := range pages {
		text, err := os.ReadFile(page)
		require.NoError(t, err)
		lines := strings.Split(string(text), "\n")
		for i := 0; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) != "```go" {
				continue
			}
			blocks++
			end := i + 1
			for end < len(lines) && strings.TrimSpace(lines[end]) != "```" {
				end++
			}
			require.Less(t, end, len(lines), "%s:%d: a ```go block without its end", page, i+1)
			var sub []string
			if i > 0 {
				sub = fromMarker.FindStringSubmatch(strings.TrimSpace(lines[i-1]))
			}
			require.NotNil(t, sub, "%s:%d: a ```go block must follow a line `<!-- from PATH.go -->` naming the compiled file it is quoted from", page, i+1)
			src, err := os.ReadFile(filepath.FromSlash(sub[1]))
			require.NoError(t, err, "%s:%d", page, i)
			snippet := normalisedLines(lines[i+1 : end])
			require.NotEmpty(t, snippet, "%s:%d: an empty ```go block", page, i+1)
			require.True(t, containsRun(normalisedLines(strings.Split(string(src), "\n")), snippet),
				"%s:%d: the ```go block is not an excerpt of %s (copy it from there again)", page, i+1, sub[1])
			i = end
		}
	}
	require.Greater(t, blocks, 5, "the pages lost their Go snippets")
}

// normalisedLines drops blank lines and collapses each line's spaces and tabs.
func normalisedLines(lines []string) []string {
	var out []string
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 0 {
			out = append(out, strings.Join(f, " "))
		}
	}
	return out
}

// containsRun says whether sub occurs in lines as a contiguous run.
func containsRun(lines, sub []string) bool {
	for i := 0; i+len(sub) <= len(lines); i++ {
		ok := true
		for j := range sub {
			if lines[i+j] != sub[j] {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}
