package main

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// The program pays order 42 once through a lost answer (the charge committed, the answer
// dropped): the status endpoint finds it; a second run answers from idem.db, sending nothing.
func TestFirstCallPaysOnce(t *testing.T) {
	api := idemtest.NewHandler(idemtest.Config{})
	defer api.Close()
	api.Script(idemtest.FaultDropAfterCommit)
	srv := httptest.NewServer(api)
	defer srv.Close()
	t.Setenv("API_URL", srv.URL)
	dir := t.TempDir()
	t.Chdir(dir)

	main()
	main()

	assert.Equal(t, 1, api.ExecutionsByReference("order-42"), "one charge for order 42")
	assert.Equal(t, 1, api.Attempts(), "one POST: the second run answered from the keystore")
	assert.Equal(t, 1, api.KeyStatusChecks())
	s, err := boltstore.OpenReadOnly(filepath.Join(dir, "idem.db"), nil)
	require.NoError(t, err)
	defer s.Close()
	recs, err := s.List(context.Background())
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.Equal(t, keystore.StateSucceeded, recs[0].State)
	assert.Equal(t, "order-42", recs[0].Intent)
}
