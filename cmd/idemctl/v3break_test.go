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

// Finding (schema version 3): the binary encoding stores times JSON cannot carry (years
// outside 0..9999), which version 2 refused at Create with ErrInvalid. Such a record is now
// written, and then every JSON view of the file fails: idemctl ls -json and show -json
// (keystore.Record's JSON, as the admin handler's) stop at it, so the operator cannot list
// the stuck payments. Create should refuse it as before, or the views should not break.
func TestV3YearBeyond9999BreaksJSONViews(t *testing.T) {
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
