package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out))
	got := out.String()
	t.Log(got)
	// checkout: one attempt, a 503, and a stop without waiting.
	assert.Regexp(t, `=> order-1 stopped after 1 attempt\(s\), last status 503, (\d+ms|0s): idem: retries exhausted; record still pending`, got)
	// payment: dropped after commit, resolved by the status endpoint, never resent.
	assert.Contains(t, got, "status endpoint: completed")
	assert.Contains(t, got, "=> order-2 succeeded: HTTP 201, source status, 1 attempt(s), 1 status check(s)")
	// payout: three throttled attempts, each followed by the server's wait, then success.
	assert.Contains(t, got, "wait 1s (the server's Retry-After), same key")
	assert.Contains(t, got, "=> payout-3 succeeded: HTTP 201, source response, 4 attempt(s)")
	// the checkout, later, finishes with its first key.
	assert.Contains(t, got, "=> order-1 succeeded: HTTP 201, source response, 1 attempt(s)")
	for _, intent := range []string{"order-1", "order-2", "payout-3"} {
		assert.Contains(t, got, "ledger: "+intent+" executed 1 time(s)")
	}
}
