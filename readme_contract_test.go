package idem

import (
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/outcome"
	"github.com/idemkit/idem/profile"
)

// TestReadmeContractTable checks the contract tables of README.md and docs/CONTRACT.md against
// the classifiers: each row's class column is what DefaultClassifiers makes of an example of
// the row, in order.
func TestReadmeContractTable(t *testing.T) {
	answer := func(code int, body string, header ...string) *outcome.Attempt {
		h := http.Header{}
		for i := 0; i+1 < len(header); i += 2 {
			h.Set(header[i], header[i+1])
		}
		return &outcome.Attempt{Response: &http.Response{StatusCode: code, Header: h}, Body: []byte(body), Written: true}
	}
	examples := []*outcome.Attempt{
		answer(201, `{}`),
		{Err: outcome.NotSent(errors.New("dial tcp: connection refused"))},
		{Err: errors.New("read: connection reset by peer"), Written: true},
		answer(504, ``),
		answer(500, `{}`, "Idempotent-Replayed", "true"),
		answer(503, ``, "Retry-After", "1"),
		answer(409, `{}`),
		answer(422, `{"error":"idempotency_key_reused"}`),
		answer(422, `{"error":"amount_invalid"}`),
		answer(403, `{}`),
		answer(303, ``),
		answer(404, `{}`, "Idempotent-Replayed", "true"),
		nil, // the call's rule for a refused resend
		nil, // a hint header: see the hint's own tests
	}
	// README's table is the one-screen summary; docs/CONTRACT.md says each row in full.
	for _, page := range []string{"README.md", "docs/CONTRACT.md"} {
		text, err := os.ReadFile(page)
		require.NoError(t, err)
		_, rest, ok := strings.Cut(string(text), "| what came back | meaning | what idem does | class |\n|---|---|---|---|\n")
		require.True(t, ok, "%s: the contract table's header changed", page)
		rows := strings.Split(rest[:strings.Index(rest, "\n\n")], "\n")
		require.Len(t, rows, len(examples), "%s: a row was added or removed: give it an example here", page)
		for i, row := range rows {
			cells := strings.Split(strings.TrimSuffix(row, " |"), "|")
			got := strings.Trim(strings.TrimSpace(cells[len(cells)-1]), "`")
			if examples[i] == nil {
				require.Equal(t, "—", got, "%s: row %d", page, i+1)
				continue
			}
			require.Equal(t, outcome.DefaultClassifiers().Classify(examples[i]).String(), got, "%s: row %d: %s", page, i+1, cells[1])
		}
	}
}

// TestProvidersMeaningsTable checks docs/PROVIDERS.md's table of meanings against the
// decision table (decide.go).
func TestProvidersMeaningsTable(t *testing.T) {
	page, err := os.ReadFile("docs/PROVIDERS.md")
	require.NoError(t, err)
	for m := profile.InProgress; m <= profile.StoredError; m++ {
		row := "| `" + m.String() + "` | `" + classOf(m).String() + "` |"
		require.Contains(t, string(page), row, "docs/PROVIDERS.md lacks the row for %s", m)
	}
}
