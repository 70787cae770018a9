package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// show and resolve find a key's tenant when only one tenant has it, and name the tenants when
// more than one does; -tenant still picks one. The same through a service's admin handler.
func TestShowWithoutTenant(t *testing.T) {
	db := seed(t)
	s, err := boltstore.Open(db, nil)
	require.NoError(t, err)
	addPayment(t, s, "acme", "k-twice", "")
	addPayment(t, s, "", "k-twice", "")
	require.NoError(t, s.Close())

	code, out, errs := runCmd(t, "show", "-db", db, "k-acme", "-json")
	require.Equal(t, 0, code, errs)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &m))
	assert.Equal(t, "acme", m["tenant"], "the only tenant with the key, under the flag's word")
	assert.NotContains(t, m, "scope")
	assert.Equal(t, "k-acme", m["key"])

	code, _, errs = runCmd(t, "show", "-db", db, "k-twice")
	assert.Equal(t, 1, code)
	assert.Equal(t, "idemctl: key \"k-twice\" is in 2 tenants (\"\", \"acme\"): name one with -tenant\n", errs)
	code, _, errs = runCmd(t, "show", "-db", db, "-intent", "order-1")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, `intent "order-1" is in 2 tenants ("", "acme"): name one with -tenant`)
	code, out, errs = runCmd(t, "show", "-db", db, "k-twice", "-tenant", "acme")
	require.Equal(t, 0, code, errs)
	assert.Regexp(t, `(?m)^tenant +acme$`, out)

	// resolve too: the manual record is in tenant "" only.
	code, out, errs = runCmd(t, "resolve", "-db", db, "k-manual", "-verdict", "not_executed", "-note", "ticket 9", "-json")
	require.Equal(t, 0, code, errs)
	require.NoError(t, json.Unmarshal([]byte(out), &m))
	assert.Equal(t, "", m["tenant"])
	assert.Equal(t, keystore.StateFailed, readRecord(t, db, "", "k-manual").State)
	code, _, errs = runCmd(t, "resolve", "-db", db, "k-twice", "-verdict", "executed", "-note", "x")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "name one with -tenant")

	api, _, _ := apiWithAuth(t)
	srv := adminService(t, db, api.URL)
	t.Setenv("IDEMCTL_TEST_TOKEN", "t0ken")
	tgt := []string{"-url", srv.URL + "/idem", "-token-env", "IDEMCTL_TEST_TOKEN", "-token-header", "X-Admin-Token"}
	code, out, errs = runCmd(t, append([]string{"show", "k-acme"}, tgt...)...)
	require.Equal(t, 0, code, errs)
	assert.Regexp(t, `(?m)^tenant +acme$`, out)
	code, _, errs = runCmd(t, append([]string{"show", "k-twice"}, tgt...)...)
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, `key "k-twice" is in 2 tenants ("", "acme")`)
}

// ls lists the oldest -limit records (100 by default) and says on stderr when more match;
// -limit 0 lists every one. JSON names the tenant "tenant", as the flag does.
func TestLsLimit(t *testing.T) {
	db := seed(t)
	keys := func(out string) []string {
		var rows []map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &rows), out)
		var k []string
		for _, r := range rows {
			assert.Contains(t, r, "tenant")
			assert.NotContains(t, r, "scope")
			k = append(k, r["key"].(string))
		}
		return k
	}
	code, out, errs := runCmd(t, "ls", "-db", db, "-json", "-limit", "2")
	require.Equal(t, 0, code, errs)
	assert.Equal(t, []string{"k-ok", "k-manual"}, keys(out))
	assert.Equal(t, "idemctl: showing the oldest 2 records; more match (-limit N, or -limit 0 for every one)\n", errs)
	for _, args := range [][]string{{"-limit", "0"}, {"-limit", "5"}, nil} {
		code, out, errs = runCmd(t, append([]string{"ls", "-db", db, "-json"}, args...)...)
		require.Equal(t, 0, code, errs)
		assert.Equal(t, []string{"k-ok", "k-manual", "k-pending", "k-acme", "k-failed"}, keys(out), args)
		assert.Empty(t, errs, args)
	}
	code, _, errs = runCmd(t, "ls", "-db", db, "-limit", "-1")
	assert.Equal(t, 2, code)
	assert.Contains(t, errs, "-limit must not be negative")

	// Through the admin handler (pages of 2), paging stops once the limit is reached.
	api, _, _ := apiWithAuth(t)
	srv := adminService(t, db, api.URL)
	t.Setenv("IDEMCTL_TEST_TOKEN", "t0ken")
	code, out, errs = runCmd(t, "ls", "-url", srv.URL+"/idem", "-token-env", "IDEMCTL_TEST_TOKEN", "-token-header", "X-Admin-Token", "-json", "-limit", "3")
	require.Equal(t, 0, code, errs)
	assert.Equal(t, []string{"k-ok", "k-manual", "k-pending"}, keys(out))
	assert.Contains(t, errs, "showing the oldest 3 records")
}

// recover exits 1 when the run leaves records unresolved (here a stored 500: manual), after
// printing what it did; the table's errors are printed whole.
func TestRecoverUnresolvedExitsNonZero(t *testing.T) {
	srv, api, _ := apiWithAuth(t)
	db := filepath.Join(t.TempDir(), "idem.db")
	s, err := boltstore.Open(db, nil)
	require.NoError(t, err)
	addPayment(t, s, "", "3f0c1d0e-5b8a-4c52-9a55-2b0d6b1f7a10", "order-9")
	require.NoError(t, s.Close())
	api.Script(idemtest.FaultStored500)

	code, out, errs := runCmd(t, "recover", "-db", db, "-base-url", srv.URL, "-status-path", idemtest.PaymentsPath+"/operations/{key}")
	assert.Equal(t, 1, code)
	assert.Equal(t, "idemctl: recover left 1 record(s) manual: settle them with -lookup or idemctl resolve (idemctl ls -state manual); every other record was reconciled\n", errs)
	rec := readRecord(t, db, "", "3f0c1d0e-5b8a-4c52-9a55-2b0d6b1f7a10")
	require.Equal(t, keystore.StateManual, rec.State)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.GreaterOrEqual(t, len(lines), 4, out)
	assert.Equal(t, "pending 1, skipped 0, succeeded 0, failed 0, manual 1, unknown 0, purged 0, resolved 0", lines[0])
	assert.Equal(t, []string{"STATE", "TENANT", "INTENT", "KEY"}, strings.Fields(lines[1]))
	assert.Equal(t, []string{"manual", "-", "order-9", "3f0c1d0e-5b8a-4c52-9a55-2b0d6b1f7a10"}, strings.Fields(lines[2]))
	errText := strings.Join(strings.Fields(strings.Join(lines[3:], " ")), " ")
	assert.True(t, strings.HasPrefix(errText, "error of 3f0c1d0e-5b8a-4c52-9a55-2b0d6b1f7a10: "), errText)
	assert.Contains(t, errText, "500", "the stored answer's status, at the error's end, is printed")
}

// The recover table prints each error whole, wrapped within 100 columns.
func TestRecoverTablePrintsErrorsWhole(t *testing.T) {
	cause := "idem: execution began, effect unknown: the server stored 500 for key k-1 (Idempotent-Replayed: true); " +
		"the key can tell no more: settle it by a lookup or a person: cause: " + strings.Repeat("dial tcp 10.0.0.7:443: i/o timeout; ", 4) +
		"averyveryverylongwordwithoutanyspaceatallthatisstillpartofthecause" + strings.Repeat("x", 120)
	var b strings.Builder
	require.NoError(t, writeRecover(&b, recoverOut{Report: map[string]int{"manual": 1},
		Records: []recoveredEntry{{Record: summary(&keystore.Record{Key: "k-1", State: keystore.StateManual}, testNow), Error: cause}, {
			Record: summary(&keystore.Record{Key: "k-2", State: keystore.StateSucceeded}, testNow)}}}))
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	for _, l := range lines {
		assert.LessOrEqual(t, utf8.RuneCountInString(l), 100, l)
	}
	i := 0
	for i < len(lines) && !strings.HasPrefix(lines[i], "error of k-1: ") {
		i++
	}
	require.Less(t, i, len(lines), b.String())
	var joined strings.Builder
	for j, l := range lines[i:] {
		if j > 0 {
			require.True(t, strings.HasPrefix(l, "  "), "continuation lines are indented: %q", l)
		}
		joined.WriteString(strings.TrimPrefix(l, "  "))
	}
	// Wrapped at spaces, or cut inside the long word: with spaces and the indent taken out, the
	// lines hold every character of the error.
	assert.Equal(t, strings.ReplaceAll("error of k-1: "+cause, " ", ""), strings.ReplaceAll(joined.String(), " ", ""))
	assert.NotContains(t, b.String(), "k-2:", "a record without an error has no error line")
}

// An empty but valid bbolt file (no buckets) is not a keystore: purge and the other writing
// commands refuse it and leave it byte for byte as it was, as ls does.
func TestPurgeRefusesBoltFileWithoutKeystore(t *testing.T) {
	db := filepath.Join(t.TempDir(), "other.db")
	raw, err := bbolt.Open(db, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, raw.Close())
	before, err := os.ReadFile(db)
	require.NoError(t, err)

	for _, args := range [][]string{
		{"purge", "-db", db, "-older-than", "72h"},
		{"resolve", "-db", db, "k", "-tenant", "", "-verdict", "executed", "-note", "x"},
		{"recover", "-db", db, "-base-url", "http://127.0.0.1:1"},
		{"ls", "-db", db},
	} {
		code, out, errs := runCmd(t, args...)
		assert.Equal(t, 1, code, args)
		assert.Empty(t, out, args)
		assert.Contains(t, errs, "is not an idem keystore", args)
	}
	after, err := os.ReadFile(db)
	require.NoError(t, err)
	assert.Equal(t, before, after, "the file is left as it was")
	_, err = boltstore.OpenReadOnly(db, nil)
	require.ErrorIs(t, err, boltstore.ErrNotKeystore, "still no keystore buckets")

	// A keystore file still purges.
	good := seed(t)
	code, out, errs := runCmd(t, "purge", "-db", good, "-older-than", "72h")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "purged 1 ")
}
