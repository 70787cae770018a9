package idem

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/bbolt"

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
	var events []DamagedRecordEvent
	c, err := NewClient(Config{BaseURL: srv.URL, Store: store, KeyStatusURL: statusPath,
		Hooks: Hooks{OnDamagedRecord: func(e DamagedRecordEvent) { events = append(events, e) }}})
	require.NoError(t, err)
	defer c.Close()

	rep, err := c.Recover(ctx, nil)
	var de *DamagedRecordsError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, []string{"k-3"}, de.Keys())
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

// POST /recover on the admin handler, with one damaged record among five pending: 200 with
// the report and the four outcomes, the damaged key listed under "damaged", not a 500 that
// drops what the run just reconciled.
func TestAdminRecoverListsDamagedRecords(t *testing.T) {
	store, _, _ := damagedBoltStore(t)
	srv := idemtest.NewServer(idemtest.Config{})
	defer srv.Close()
	c, err := NewClient(Config{BaseURL: srv.URL, Store: store, KeyStatusURL: statusPath})
	require.NoError(t, err)
	defer c.Close()

	h := NewAdminHandler(c, AdminOptions{Authorize: func(*http.Request) error { return nil }})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/recover", nil))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var out struct {
		Report  map[string]int      `json:"report"`
		Records []map[string]any    `json:"records"`
		Damaged []map[string]string `json:"damaged"`
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &out))
	assert.Equal(t, 4, out.Report["succeeded"])
	assert.Len(t, out.Records, 4)
	require.Len(t, out.Damaged, 1)
	assert.Equal(t, "k-3", out.Damaged[0]["key"])
	assert.NotEmpty(t, out.Damaged[0]["error"])
}

// damagedBoltStore opens a bbolt keystore holding five pending records k-1..k-5 created a
// second apart (k-1 oldest), k-3's JSON damaged, and returns it with its path and k-3's
// stored bytes.
func damagedBoltStore(t *testing.T) (store *boltstore.Store, path string, garbage []byte) {
	t.Helper()
	ctx := context.Background()
	path = filepath.Join(t.TempDir(), "keys.db")
	store, err := boltstore.Open(path, nil)
	require.NoError(t, err)
	start := time.Now().Add(-time.Hour)
	for i, k := range []string{"k-1", "k-2", "k-3", "k-4", "k-5"} {
		require.NoError(t, store.Create(ctx, newPendingRecord(k, 100+i, "ref-"+k, start.Add(time.Duration(i)*time.Second))))
	}
	require.NoError(t, store.Close())
	garbage = []byte(`{"key":`)
	db, err := bbolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket([]byte("records")).Put(append([]byte{0}, "k-3"...), garbage)
	}))
	require.NoError(t, db.Close())
	store, err = boltstore.Open(path, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	return store, path, garbage
}

// GET /records and GET /stats over a keystore with a damaged record: the other records are
// listed and counted, the damaged one is named under "damaged" (and counted in /stats), not
// a 500 for the whole listing; its bytes stay as they were.
func TestAdminListsAndCountsDamagedRecords(t *testing.T) {
	store, path, garbage := damagedBoltStore(t)
	c, err := NewClient(Config{BaseURL: "http://api.example", Store: store})
	require.NoError(t, err)
	defer c.Close()
	h := NewAdminHandler(c, AdminOptions{Authorize: func(*http.Request) error { return nil }, MaxLimit: 3})

	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/records?state=pending", nil))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var page struct {
		Records    []AdminRecord       `json:"records"`
		Total      int                 `json:"total"`
		NextOffset int                 `json:"next_offset"`
		Damaged    []map[string]string `json:"damaged"`
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &page))
	var keys []string
	for _, r := range page.Records {
		keys = append(keys, r.Key)
	}
	assert.Equal(t, []string{"k-1", "k-2", "k-4"}, keys, "oldest first")
	assert.Equal(t, 4, page.Total)
	assert.Equal(t, 3, page.NextOffset)
	require.Len(t, page.Damaged, 1)
	assert.Equal(t, "k-3", page.Damaged[0]["key"])
	assert.Contains(t, page.Damaged[0]["error"], "k-3")

	// Another tenant's listing names none of tenant ""'s keys, damaged or not.
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/records?tenant=acme", nil))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.JSONEq(t, `{"records":[],"total":0,"damaged":[]}`, w.Body.String())

	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/stats", nil))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var stats struct {
		Records AdminRecordStats `json:"records"`
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &stats))
	assert.Equal(t, 4, stats.Records.Total)
	assert.Equal(t, 4, stats.Records.ByState[keystore.StatePending])
	assert.Equal(t, 1, stats.Records.Damaged)

	require.NoError(t, c.Close())
	require.NoError(t, store.Close())
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.View(func(tx *bbolt.Tx) error {
		assert.Equal(t, garbage, tx.Bucket([]byte("records")).Get(append([]byte{0}, "k-3"...)))
		return nil
	}))
}
