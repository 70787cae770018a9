package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMain lets the test binary play the children: run re-executes os.Executable().
func TestMain(m *testing.M) {
	if raw, ok := os.LookupEnv(childEnv); ok {
		if err := child(raw, os.Stdout); err != nil {
			os.Stderr.WriteString("child: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out))
	got := out.String()
	t.Log(got)
	assert.Contains(t, got, "state pending")
	assert.Contains(t, got, "ledger: order-42 executed 0 time(s) so far")
	assert.Contains(t, got, "status endpoint, key")
	assert.Regexp(t, `reconciled order-42 \(key [0-9a-f-]+\): succeeded, HTTP 201, source status`, got)
	assert.Contains(t, got, "Recover: 1 pending record(s), 1 succeeded, 0 failed, 0 still unknown")
	assert.Contains(t, got, "source store, 0 request(s) sent")
	assert.Contains(t, got, "The ledger: order-42 executed 1 time(s).")
}
