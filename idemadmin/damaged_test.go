package idemadmin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/bbolt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// POST /recover on the admin handler, with one damaged record among five pending: 200 with
// the report and the four outcomes, the damaged key listed under "damaged", not a 500 that
// drops what the run just reconciled.
func TestAdminRecoverListsDamagedRecords(t *testing.T) {
	store, _, _ := damagedBoltStore(t)
	srv := idemtest.NewServer(idemtest.Config{})
	defer srv.Close()
	c, err := idem.NewClient(idem.Config{BaseURL: srv.URL, Store: store, KeyStatusURL: statusPath})
	require.NoError(t, err)
	defer c.Close()

	h := NewHandler(c, Options{Authorize: func(*http.Request) error { return nil }})
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
	c, err := idem.NewClient(idem.Config{BaseURL: "http://api.example", Store: store})
	require.NoError(t, err)
	defer c.Close()
	h := NewHandler(c, Options{Authorize: func(*http.Request) error { return nil }, MaxLimit: 3})

	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/records?state=pending", nil))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var page struct {
		Records    []Record            `json:"records"`
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
		Records RecordStats `json:"records"`
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

// The admin handler over a nil or zero idem.Client answers 500 on every route, never panics.
func TestHandlerOverNilOrZeroClient(t *testing.T) {
	for _, c := range []*idem.Client{nil, {}} {
		h := NewHandler(c, Options{Authorize: func(*http.Request) error { return nil }})
		for _, r := range [][2]string{{"GET", "/records"}, {"GET", "/record?key=k"}, {"GET", "/stats"}, {"POST", "/recover"},
			{"POST", "/resolve"}} {
			w := httptest.NewRecorder()
			require.NotPanics(t, func() {
				h.ServeHTTP(w, httptest.NewRequest(r[0], r[1], strings.NewReader(`{"key":"k","verdict":"executed","note":"x"}`)))
			}, r)
			assert.Equal(t, http.StatusInternalServerError, w.Code, r)
			assert.Contains(t, w.Body.String(), "nil or zero *idem.Client", r)
		}
	}
}
