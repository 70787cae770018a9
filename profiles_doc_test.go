package idem

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/profile"
)

// providerTable is the table docs/PROVIDERS.md must hold between its markers, made from
// the profiles themselves: the page cannot drift from the code.
func providerTable() string {
	var b strings.Builder
	b.WriteString("| profile | key carrier | key retention (caps KeyTTL) | a repeat of the key returns | how an unknown outcome is settled, in order |\n")
	b.WriteString("|---|---|---|---|---|\n")
	for _, p := range profile.All() {
		carrier := "header `" + p.KeyHeader + "`"
		if p.KeyField != "" {
			carrier = "body member `" + p.KeyField + "`"
		}
		if p.MaxKeyLength > 0 {
			carrier += fmt.Sprintf(", ≤ %d bytes", p.MaxKeyLength)
		}
		retention := "not published (KeyTTL: 24 h default)"
		if p.Retention > 0 {
			retention = fmtHours(p.Retention)
		}
		var routes []string
		for _, r := range p.Settle {
			s := r.Kind.String()
			if r.Path != "" {
				s += " `" + r.Path + "`"
			}
			if r.Lag > 0 {
				s += " (lag " + fmtHours(r.Lag) + ")"
			}
			routes = append(routes, s)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", p.Name, carrier, retention, p.Replay, strings.Join(routes, "; "))
	}
	return b.String()
}

func fmtHours(d time.Duration) string {
	switch {
	case d > 24*time.Hour && d%(24*time.Hour) == 0:
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%d min", d/time.Minute)
	}
	return d.String()
}

func TestProvidersPageMatchesProfiles(t *testing.T) {
	page, err := os.ReadFile("docs/PROVIDERS.md")
	require.NoError(t, err)
	const begin, end = "<!-- profiles:begin -->\n", "<!-- profiles:end -->"
	_, rest, ok := strings.Cut(string(page), begin)
	require.True(t, ok, "docs/PROVIDERS.md has no %q marker", begin)
	table, _, ok := strings.Cut(rest, end)
	require.True(t, ok)
	require.Equal(t, providerTable(), table, "docs/PROVIDERS.md's table differs from the profiles; paste the expected one")
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	require.Contains(t, string(readme), "docs/PROVIDERS.md", "the README points to the providers page")
}
