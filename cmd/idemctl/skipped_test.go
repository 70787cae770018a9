package main

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// ls of a sealed file without its key ring, or with another one, lists nothing it can read:
// it names every skipped record, says why, and exits 1, so that "0 record(s)" is not taken
// for an empty keystore. With the right key ring it lists every record and exits 0.
func TestLsSkippedRecordsExitOne(t *testing.T) {
	key := bytes.Repeat([]byte{3}, 32)
	ring, err := keystore.NewKeyRing("k1", map[string][]byte{"k1": key})
	require.NoError(t, err)
	db := filepath.Join(t.TempDir(), "idem.db")
	s, err := boltstore.Open(db, &boltstore.Options{KeyRing: ring})
	require.NoError(t, err)
	seedStore(t, s)
	require.NoError(t, s.Close())
	t.Setenv("IDEMCTL_TEST_RING", "k1:"+base64.StdEncoding.EncodeToString(key))
	t.Setenv("IDEMCTL_TEST_WRONG", "k1:"+base64.StdEncoding.EncodeToString(make([]byte, 32)))
	t.Setenv("IDEMCTL_TEST_OTHER", "k2:"+base64.StdEncoding.EncodeToString(key))

	for _, tc := range []struct {
		name string
		args []string
		hint string
	}{
		{"no key ring", nil, "give the service's key ring with -keyring-env NAME"},
		{"wrong key", []string{"-keyring-env", "IDEMCTL_TEST_WRONG"}, "the key ring of -keyring-env IDEMCTL_TEST_WRONG"},
		{"other key id", []string{"-keyring-env", "IDEMCTL_TEST_OTHER"}, "the key ring of -keyring-env IDEMCTL_TEST_OTHER"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCmd(t, append([]string{"ls", "-db", db}, tc.args...)...)
			assert.Equal(t, 1, code, errs)
			assert.Contains(t, out, "0 record(s)")
			assert.Equal(t, 5, bytes.Count([]byte(errs), []byte("idemctl: skipped a record that cannot be decoded")), errs)
			assert.Contains(t, errs, "ls skipped 5 record(s) that cannot be decoded")
			assert.Contains(t, errs, tc.hint)
			code, out, _ = runCmd(t, append([]string{"ls", "-db", db, "-json"}, tc.args...)...)
			assert.Equal(t, 1, code)
			assert.JSONEq(t, "[]", out, "-json stays an array")
		})
	}
	code, out, errs := runCmd(t, "ls", "-db", db, "-keyring-env", "IDEMCTL_TEST_RING")
	require.Equal(t, 0, code, errs)
	assert.Empty(t, errs)
	assert.Contains(t, out, "5 record(s)")

	// A damaged (not sealed) record: the others listed, exit 1 pointing at verify.
	plain := seed(t)
	damage(t, plain, "k-ok")
	code, out, errs = runCmd(t, "ls", "-db", plain)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "k-pending")
	assert.Contains(t, errs, "ls skipped 1 record(s)")
	assert.Contains(t, errs, "idemctl verify")
}

// -key-ttl must be a positive duration: 0 or a negative one is a usage error saying so, not
// a comparison with -older-than.
func TestPurgeKeyTTLMustBePositive(t *testing.T) {
	db := seed(t)
	for _, ttl := range []string{"0", "0s", "-1h"} {
		code, out, errs := runCmd(t, "purge", "-db", db, "-older-than", "48h", "-key-ttl", ttl)
		assert.Equal(t, 2, code, ttl)
		assert.Empty(t, out, ttl)
		assert.Contains(t, errs, "-key-ttl", ttl)
		assert.Contains(t, errs, "a positive duration", ttl)
		assert.NotContains(t, errs, "shorter than", ttl)
	}
	code, _, errs := runCmd(t, "purge", "-db", db, "-older-than", "48h", "-key-ttl", "72h")
	assert.Equal(t, 2, code)
	assert.Contains(t, errs, "-older-than 48h0m0s is shorter than -key-ttl 72h0m0s")
	assert.NotNil(t, readRecord(t, db, "", "k-ok"), "nothing purged")
}

// quarantine without -tenant finds the only tenant that has the key, as show and resolve
// do; a key in no tenant is not found, naming that no tenant has it.
func TestQuarantineFindsTheTenant(t *testing.T) {
	db := seed(t)
	raw, err := bbolt.Open(db, 0o600, nil)
	require.NoError(t, err)
	k := binary.AppendUvarint(nil, uint64(len("acme")))
	k = append(append(k, "acme"...), "k-acme"...)
	require.NoError(t, raw.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket([]byte("records")).Put(k, []byte(`{"key":`))
	}))
	require.NoError(t, raw.Close())

	code, _, errs := runCmd(t, "quarantine", "-db", db, "k-nowhere", "-outcome", "executed", "-note", "ops")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "in any tenant")
	code, out, errs := runCmd(t, "quarantine", "-db", db, "k-acme", "-outcome", "executed", "-note", "ops: charged, ticket 7")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, `quarantined key "k-acme"`)
	rec := readRecord(t, db, "acme", "k-acme")
	assert.Equal(t, keystore.StateSucceeded, rec.State)
	assert.Equal(t, "acme", rec.Scope)
	code, out, errs = runCmd(t, "verify", "-db", db)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "quarantined 1, problems 0")
}
