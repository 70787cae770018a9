package boltstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/idemkit/idem/keystore"
)

func TestOpenReadOnly(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "idem.db")
	w, err := Open(path, nil)
	require.NoError(t, err)
	now := time.Now().UTC().Truncate(time.Second)
	rec := &keystore.Record{Key: "k1", Intent: "order-1", Fingerprint: "fp", State: keystore.StatePending,
		Request: keystore.Request{Method: "POST", URL: "/v1/payments", Body: []byte(`{}`)}, CreatedAt: now, UpdatedAt: now}
	require.NoError(t, w.Create(ctx, rec))

	// The service holds the file: a reader gives up within its timeout with ErrLocked.
	start := time.Now()
	_, err = OpenReadOnly(path, &Options{Timeout: 150 * time.Millisecond})
	require.ErrorIs(t, err, ErrLocked)
	assert.Less(t, time.Since(start), 5*time.Second)
	require.NoError(t, w.Close())

	before, err := os.ReadFile(path)
	require.NoError(t, err)
	r1, err := OpenReadOnly(path, nil)
	require.NoError(t, err)
	r2, err := OpenReadOnly(path, nil) // readers share the file
	require.NoError(t, err)
	got, err := r1.GetByIntent(ctx, "", "order-1")
	require.NoError(t, err)
	assert.Equal(t, "k1", got.Key)
	list, err := r2.List(ctx, keystore.StatePending)
	require.NoError(t, err)
	assert.Len(t, list, 1)

	got.State = keystore.StateSucceeded
	require.ErrorIs(t, r1.Update(ctx, got), berrors.ErrDatabaseReadOnly)
	_, err = r1.Purge(ctx, now.Add(time.Hour))
	require.ErrorIs(t, err, berrors.ErrDatabaseReadOnly)
	// A writer cannot open while readers hold the file.
	_, err = Open(path, &Options{Timeout: 100 * time.Millisecond})
	require.ErrorIs(t, err, ErrLocked)
	require.NoError(t, r1.Close())
	require.NoError(t, r2.Close())
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, before, after, "a read-only store leaves the file byte for byte")
}

func TestOpenReadOnlyRefuses(t *testing.T) {
	dir := t.TempDir()
	_, err := OpenReadOnly(filepath.Join(dir, "missing.db"), nil)
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = os.Stat(filepath.Join(dir, "missing.db"))
	require.True(t, errors.Is(err, os.ErrNotExist), "nothing created")

	empty := filepath.Join(dir, "empty.db")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	_, err = OpenReadOnly(empty, nil)
	require.ErrorIs(t, err, ErrNotKeystore)

	text := filepath.Join(dir, "text.db")
	require.NoError(t, os.WriteFile(text, []byte("hello, this is not bbolt"), 0o600))
	_, err = OpenReadOnly(text, nil)
	require.ErrorIs(t, err, ErrNotKeystore)
}
