package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// docs/CLIENT.md's Quick start is quickstart.go, byte for byte, after its marker.
func TestDocsQuoteQuickstart(t *testing.T) {
	readme, err := os.ReadFile("../../docs/CLIENT.md")
	require.NoError(t, err)
	src, err := os.ReadFile("quickstart.go")
	require.NoError(t, err)
	const begin, end = "<!-- from examples/quickstart/quickstart.go -->\n```go\n", "\n```\n"
	i := bytes.Index(readme, []byte(begin))
	require.GreaterOrEqual(t, i, 0, "docs/CLIENT.md has no %q marker", begin)
	rest := readme[i+len(begin):]
	j := bytes.Index(rest, []byte(end))
	require.GreaterOrEqual(t, j, 0, "docs/CLIENT.md has no %q marker", end)
	assert.Equal(t, string(src), string(rest[:j+1]), "docs/CLIENT.md's Quick start differs from examples/quickstart/quickstart.go: copy the file into the page")
}

// The Quick start pays once through a dropped connection (the charge committed, the answer
// lost): the status endpoint says it completed, nothing is resent; a second run answers from
// the keystore.
func TestPayAgainstIdemtest(t *testing.T) {
	api := idemtest.NewHandler(idemtest.Config{})
	api.Script(idemtest.FaultDropAfterCommit)
	var mu sync.Mutex
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		api.ServeHTTP(w, r)
	}))
	defer srv.Close()
	defer api.Close()
	db := filepath.Join(t.TempDir(), "idem.db")

	for run := 1; run <= 2; run++ {
		next, err := pay(context.Background(), srv.URL, db, "sk_test_42")
		require.NoError(t, err, "run %d", run)
		assert.Equal(t, "paid", next)
	}
	assert.Equal(t, 1, api.ExecutionsByReference("order-42"), "one charge for order 42")
	assert.Equal(t, 1, api.Attempts(), "one POST: the lost answer was found through the status endpoint")
	assert.Equal(t, 1, api.KeyStatusChecks())
	for _, a := range auth {
		assert.Equal(t, "Bearer sk_test_42", a)
	}

	s, err := boltstore.OpenReadOnly(db, nil)
	require.NoError(t, err)
	defer s.Close()
	recs, err := s.List(context.Background())
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.Equal(t, keystore.StateSucceeded, recs[0].State)
	assert.Equal(t, "order-42", recs[0].Intent)
	assert.Empty(t, recs[0].Request.Header.Values("Authorization"), "the credential is never persisted")
}
