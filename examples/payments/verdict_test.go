package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestVerdictLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    summary
		want string
	}{
		{"held", summary{Intents: 10, ExecutedOnce: 10},
			"verdict: exactly-once held: no reference charged twice, none lost"},
		{"held, unfinished", summary{Intents: 10, NeedsReconciliation: 2, NotExecuted: 1},
			"verdict: exactly-once held: no reference charged twice, none lost; unfinished: 2 need reconciliation, 1 not executed (see stderr)"},
		{"duplicate", summary{Intents: 10, Duplicates: 1},
			"verdict: EXACTLY-ONCE VIOLATED: 1 duplicates, 0 lost, 0 acknowledged wrong"},
		{"lost and acknowledged wrong", summary{Intents: 10, Lost: 2, AckWrong: 1},
			"verdict: EXACTLY-ONCE VIOLATED: 0 duplicates, 2 lost, 1 acknowledged wrong"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.s.verdict())
			var out bytes.Buffer
			require.NoError(t, tc.s.write(&out, false))
			assert.Contains(t, out.String(), "\n"+tc.want+"\nwall time ", "the verdict closes the table, before the wall time")
		})
	}
}
