package idem

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/event"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// newPendingRecord is what Do persists before sending payment(amount, ref) under key.
func newPendingRecord(key string, amount int, ref string, at time.Time) *keystore.Record {
	body := paymentBody(amount, ref)
	return &keystore.Record{Key: key, Fingerprint: Fingerprint(http.MethodPost, "/v1/payments", body),
		State: keystore.StatePending, CreatedAt: at, UpdatedAt: at,
		Request: keystore.Request{Method: http.MethodPost, URL: "/v1/payments",
			Header: http.Header{"Content-Type": {"application/json"}}, Body: body}}
}

// One damaged record in a real bbolt file: Recover skips it, reports it (typed error, hook,
// counter), leaves its bytes as they were, and reconciles every other pending record.
func TestRecoverSkipsDamagedRecord(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keys.db")
	store, err := boltstore.Open(path, nil)
	require.NoError(t, err)
	now := time.Now()
	keys := []string{"k-1", "k-2", "k-3", "k-4", "k-5"}
	for i, k := range keys {
		require.NoError(t, store.Create(ctx, newPendingRecord(k, 100+i, "ref-"+k, now)))
	}
	require.NoError(t, store.Close())

	// Damage k-3's JSON (not the pages: the file stays a sound bbolt file).
	damagedKey := append([]byte{0}, "k-3"...) // uvarint(len("")) || "" || key
	garbage := []byte(`{"scope":"","key":"k-3","state":`)
	db, err := bbolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bbolt.Tx) error { return tx.Bucket([]byte("records")).Put(damagedKey, garbage) }))
	require.NoError(t, db.Close())

	store, err = boltstore.Open(path, nil)
	require.NoError(t, err)
	srv := idemtest.NewServer(idemtest.Config{})
	defer srv.Close()
	var events []event.DamagedRecord
	c, err := NewClient(Config{BaseURL: srv.URL, Store: store, KeyStatusURL: statusPath,
		Hooks: event.Hooks{OnDamagedRecord: func(e event.DamagedRecord) { events = append(events, e) }}})
	require.NoError(t, err)
	defer c.Close()

	rep, err := c.Recover(ctx, nil)
	var de *DamagedRecordsError
	require.ErrorAs(t, err, &de)
	require.Len(t, de.Records, 1)
	assert.Equal(t, "k-3", de.Records[0].Key)
	assert.Contains(t, err.Error(), `"k-3"`)
	assert.ErrorIs(t, de.Records[0].Err, boltstore.ErrCorrupt)
	assert.Equal(t, RecoverReport{Pending: 4, Succeeded: 4}, rep)
	require.Len(t, events, 1)
	assert.Equal(t, "k-3", events[0].Key)
	assert.Equal(t, int64(1), c.Stats().DamagedRecords)
	for _, k := range keys {
		if k == "k-3" {
			continue
		}
		rec, err := store.Get(ctx, "", k)
		require.NoError(t, err)
		assert.Equal(t, keystore.StateSucceeded, rec.State, k)
		assert.Equal(t, 1, srv.ExecutionsByReference("ref-"+k), k)
	}
	assert.Zero(t, srv.ExecutionsByReference("ref-k-3"), "the damaged record was not sent")
	_, err = store.Get(ctx, "", "k-3")
	assert.True(t, errors.Is(err, boltstore.ErrCorrupt), "Get of the damaged record: %v", err)
	require.NoError(t, store.Close())

	// Left untouched on disk.
	db, err = bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.View(func(tx *bbolt.Tx) error {
		assert.Equal(t, garbage, tx.Bucket([]byte("records")).Get(damagedKey))
		return nil
	}))
}
