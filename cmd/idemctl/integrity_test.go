package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/idemadmin"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// settledMeanwhile is a keystore whose first Get of a key returns the record as it was and
// then lets another process resolve it: the race of two operators resolving one record.
type settledMeanwhile struct {
	keystore.Store
	first atomic.Bool
}

func (s *settledMeanwhile) Get(ctx context.Context, scope, key string) (*keystore.Record, error) {
	rec, err := s.Store.Get(ctx, scope, key)
	if err == nil && s.first.CompareAndSwap(false, true) {
		other := rec.Clone()
		other.State, other.Reason, other.Response = keystore.StateSucceeded, keystore.ReasonExecuted, &keystore.Response{StatusCode: 200}
		if err := s.Store.Update(ctx, other); err != nil {
			return nil, err
		}
	}
	return rec, err
}

// The loser of two resolves printed "key … is manual, not manual": the state it named was
// the one it read before the winner wrote. It names the state Resolve found.
func TestResolveLoserNamesTheStoredState(t *testing.T) {
	mem := keystore.NewMemory()
	seedStore(t, mem)
	b := &storeBackend{s: &settledMeanwhile{Store: mem}, now: fixedNow}
	_, err := b.resolve(context.Background(), idemadmin.ResolveRequest{Key: "k-manual", Verdict: "not_executed", Note: "ops"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "record is succeeded")
	assert.Contains(t, err.Error(), "only a manual record can be resolved")
	assert.NotContains(t, err.Error(), "manual, not manual")
	rec, err := mem.Get(context.Background(), "", "k-manual")
	require.NoError(t, err)
	assert.Equal(t, keystore.StateSucceeded, rec.State) // the winner's verdict stands
}

// changeIntentKey moves the intent index entry of (scope "", intent) to a key one byte off,
// keeping its value: the damage bbolt does not see.
func changeIntentKey(t *testing.T, db, intent string) {
	t.Helper()
	raw, err := bbolt.Open(db, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, raw.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("intents"))
		k := append([]byte{0}, intent...)
		v := append([]byte(nil), b.Get(k)...)
		require.NotEmpty(t, v)
		if err := b.Delete(k); err != nil {
			return err
		}
		k[len(k)-1]++
		return b.Put(k, v)
	}))
	require.NoError(t, raw.Close())
}

func TestVerifyQuarantineRebuild(t *testing.T) {
	db := seed(t)
	code, out, errs := runCmd(t, "verify", "-db", db)
	require.Equal(t, 0, code, errs)
	assert.Equal(t, "records 5, intents 4, quarantined 0, problems 0\n", out)

	// One changed byte in the intent index: idemctl saw nothing, and the next payment of
	// order-3 was charged again.
	changeIntentKey(t, db, "order-3")
	code, out, errs = runCmd(t, "stats", "-db", db)
	require.Equal(t, 0, code, errs)
	// one changed key, seen from the record, the changed entry and its twin
	assert.Contains(t, out, "intent index problems  3 (idemctl verify names them)")
	damage(t, db, "k-pending")
	code, out, errs = runCmd(t, "verify", "-db", db, "-json")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "problem(s)")
	var rep struct {
		Records  int          `json:"records"`
		Problems []problemRow `json:"problems"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.Equal(t, 4, rep.Records)
	buckets := map[string]int{}
	for _, p := range rep.Problems {
		buckets[p.Bucket]++
	}
	assert.Positive(t, buckets["records"], out)          // k-pending
	assert.GreaterOrEqual(t, buckets["intents"], 2, out) // order-3 in one index only; order-1 names a damaged record
	assert.Positive(t, buckets["intenthash"], out)

	// The index is not rebuilt over a damaged record: its intent would be lost.
	code, _, errs = runCmd(t, "rebuild-index", "-db", db)
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "not rebuilt")

	for _, bad := range [][]string{
		{"quarantine", "-db", db, "k-pending", "-note", "ops"},                                          // no outcome
		{"quarantine", "-db", db, "k-pending", "-outcome", "maybe", "-note", "ops"},                     // unknown outcome
		{"quarantine", "-db", db, "k-pending", "-outcome", "executed"},                                  // no note
		{"quarantine", "-url", "http://127.0.0.1:1", "k-pending", "-outcome", "executed", "-note", "x"}, // not a file
		{"verify", "-dsn", "postgres://x"},
	} {
		code, _, errs = runCmd(t, bad...)
		assert.Equal(t, 2, code, "%v: %s", bad, errs)
	}
	code, _, errs = runCmd(t, "quarantine", "-db", db, "k-ok", "-outcome", "executed", "-note", "ops")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "not damaged")

	code, out, errs = runCmd(t, "quarantine", "-db", db, "k-pending", "-outcome", "not-executed", "-note", "ops: no charge at the provider, ticket 12", "-json")
	require.Equal(t, 0, code, errs)
	var rec keystore.Record
	require.NoError(t, json.Unmarshal([]byte(out), &rec))
	assert.Equal(t, keystore.StateFailed, rec.State)
	assert.Equal(t, "order-1", rec.Intent)

	code, out, errs = runCmd(t, "rebuild-index", "-db", db)
	require.Equal(t, 0, code, errs)
	assert.Equal(t, "rebuilt the intent index: 4 intent(s)\n", out)
	code, out, errs = runCmd(t, "verify", "-db", db)
	require.Equal(t, 0, code, errs)
	assert.Equal(t, "records 5, intents 4, quarantined 1, problems 0\n", out)
	got := readRecord(t, db, "", "k-ok")
	assert.Equal(t, "order-3", got.Intent)
}

// A file whose bodies are sealed: without the key ring idemctl names the key it lacks; with
// -keyring-env it shows the bodies.
func TestSealedFile(t *testing.T) {
	key := bytes.Repeat([]byte{3}, 32)
	ring, err := keystore.NewKeyRing("k1", map[string][]byte{"k1": key})
	require.NoError(t, err)
	db := filepath.Join(t.TempDir(), "idem.db")
	s, err := boltstore.Open(db, &boltstore.Options{KeyRing: ring})
	require.NoError(t, err)
	seedStore(t, s)
	require.NoError(t, s.Close())

	code, _, errs := runCmd(t, "show", "-db", db, "k-ok")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, `key id "k1"`)
	t.Setenv("IDEMCTL_TEST_RING", "k1:"+base64.StdEncoding.EncodeToString(key))
	code, out, errs := runCmd(t, "show", "-db", db, "k-ok", "-keyring-env", "IDEMCTL_TEST_RING", "-json")
	require.Equal(t, 0, code, errs)
	var rec keystore.Record
	require.NoError(t, json.Unmarshal([]byte(out), &rec))
	assert.Equal(t, `{"id":"pay_1"}`, string(rec.Response.Body))
	t.Setenv("IDEMCTL_TEST_RING", "k1:not-base64!")
	code, _, _ = runCmd(t, "show", "-db", db, "k-ok", "-keyring-env", "IDEMCTL_TEST_RING")
	assert.Equal(t, 2, code)
	code, out, errs = runCmd(t, "verify", "-db", db)
	require.Equal(t, 0, code, errs)
	assert.Equal(t, "records 5, intents 4, quarantined 0, problems 0\n", out)
}
