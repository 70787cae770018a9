package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// The binary encoding (schema version 3) refuses times JSON cannot carry (years outside
// 0..9999) at Create with ErrInvalid, as version 2 did: stored, such a record made every JSON
// view of the file fail (idemctl ls -json and show -json stop at it), so the operator could
// not list the stuck payments.
func TestYearBeyond9999RefusedSoJSONViewsHold(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "idem.db")
	s, err := boltstore.Open(path, nil)
	require.NoError(t, err)
	seedStore(t, s)
	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	err = s.Create(ctx, &keystore.Record{Key: "k-far", State: keystore.StatePending,
		Request: keystore.Request{Method: "POST", URL: "/v1/payments"}, CreatedAt: testNow, UpdatedAt: far})
	require.NoError(t, s.Close())
	if err != nil {
		require.True(t, errors.Is(err, keystore.ErrInvalid), "Create: %v", err)
		return // refused, as version 2 did
	}
	code, out, errOut := runCmd(t, "ls", "-db", path, "-json")
	require.Equal(t, 0, code, "ls -json: %s", errOut)
	require.Contains(t, out, "k-pending")
	code, out, errOut = runCmd(t, "show", "-db", path, "k-far", "-json")
	require.Equal(t, 0, code, "show -json: %s", errOut)
	require.True(t, strings.Contains(out, "k-far"))
}
