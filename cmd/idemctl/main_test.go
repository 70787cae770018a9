package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/bbolt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemadmin"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

var testNow = time.Now().UTC().Truncate(time.Second) // near the real time: a PostgreSQL keystore's clock is checked against it

func fixedNow() time.Time { return testNow }

// seed writes one record per state, with ages of 2 h (pending), 30 h (manual), 100 h
// (succeeded) and 1 min (failed), and a pending one in tenant "acme" aged 5 min.
func seed(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idem.db")
	s, err := boltstore.Open(path, nil)
	require.NoError(t, err)
	defer s.Close()
	seedStore(t, s)
	return path
}

func seedStore(t *testing.T, s keystore.Store) {
	t.Helper()
	add := func(scope, key, intent string, st keystore.State, age time.Duration, resp *keystore.Response) {
		at := testNow.Add(-age)
		body := []byte(`{"amount":12}`)
		require.NoError(t, s.Create(context.Background(), &keystore.Record{
			Scope: scope, Key: key, Intent: intent, Fingerprint: idem.Fingerprint("POST", "/v1/payments", body),
			State: st, Attempts: 2, LastStatusCode: 504,
			Reason: map[keystore.State]string{keystore.StateManual: "key_expired"}[st],
			Request: keystore.Request{Method: "POST", URL: "/v1/payments",
				Header: map[string][]string{"Content-Type": {"application/json"}}, Body: body},
			Response: resp, CreatedAt: at, UpdatedAt: at}))
	}
	add("", "k-pending", "order-1", keystore.StatePending, 2*time.Hour, nil)
	add("", "k-manual", "order-2", keystore.StateManual, 30*time.Hour, nil)
	add("", "k-ok", "order-3", keystore.StateSucceeded, 100*time.Hour, &keystore.Response{StatusCode: 201, Body: []byte(`{"id":"pay_1"}`)})
	add("", "k-failed", "", keystore.StateFailed, time.Minute, &keystore.Response{StatusCode: 400})
	add("acme", "k-acme", "order-1", keystore.StatePending, 5*time.Minute, nil)
}

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb, fixedNow)
	return code, out.String(), errb.String()
}

func TestLs(t *testing.T) {
	db := seed(t)
	tests := []struct {
		name string
		args []string
		keys []string
	}{
		{"all, oldest first", nil, []string{"k-ok", "k-manual", "k-pending", "k-acme", "k-failed"}},
		{"stuck", []string{"-state", "pending,manual"}, []string{"k-manual", "k-pending", "k-acme"}},
		{"stuck for an hour", []string{"-state", "pending,manual", "-min-age", "1h"}, []string{"k-manual", "k-pending"}},
		{"default tenant", []string{"-tenant", ""}, []string{"k-ok", "k-manual", "k-pending", "k-failed"}},
		{"tenant acme", []string{"-tenant", "acme"}, []string{"k-acme"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runCmd(t, append([]string{"ls", "-db", db, "-json"}, tt.args...)...)
			require.Equal(t, 0, code, errs)
			var rows []idemadmin.Record
			require.NoError(t, json.Unmarshal([]byte(out), &rows))
			var keys []string
			for _, r := range rows {
				keys = append(keys, r.Key)
			}
			assert.Equal(t, tt.keys, keys)
		})
	}
	code, out, _ := runCmd(t, "ls", "-db", db, "-state", "manual")
	require.Equal(t, 0, code)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3)
	assert.Equal(t, []string{"STATE", "AGE", "LAST", "TENANT", "INTENT", "KEY", "REASON"}, strings.Fields(lines[0]))
	assert.Equal(t, []string{"manual", "30h", "504", "-", "order-2", "k-manual", "key_expired"}, strings.Fields(lines[1]))
	assert.Equal(t, "1 record(s)", lines[2])
}

func TestShowAndStats(t *testing.T) {
	db := seed(t)
	code, out, errs := runCmd(t, "show", "-db", db, "-json", "k-ok")
	require.Equal(t, 0, code, errs)
	var rec keystore.Record
	require.NoError(t, json.Unmarshal([]byte(out), &rec))
	assert.Equal(t, keystore.StateSucceeded, rec.State)
	assert.Equal(t, `{"id":"pay_1"}`, string(rec.Response.Body))

	code, out, _ = runCmd(t, "show", "-db", db, "-tenant", "acme", "-intent", "order-1")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "k-acme")
	assert.Regexp(t, `(?m)^  header +Content-Type: application/json$`, out)

	code, _, errs = runCmd(t, "show", "-db", db, "nope")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, `no record for key "nope" in any tenant`)

	code, out, errs = runCmd(t, "stats", "-db", db, "-json")
	require.Equal(t, 0, code, errs)
	assert.JSONEq(t, `{"records":{"total":5,"damaged":0,"tenants":2,"oldest_pending_seconds":7200,"oldest_manual_seconds":108000,
		"by_state":{"pending":2,"manual":1,"succeeded":1,"failed":1}}}`, out)
	code, out, _ = runCmd(t, "stats", "-db", db)
	require.Equal(t, 0, code)
	assert.Contains(t, out, "oldest manual   30h\n")
}

func TestPurge(t *testing.T) {
	db := seed(t)
	code, out, errs := runCmd(t, "purge", "-db", db, "-older-than", "72h", "-dry-run")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "would purge 1 ")
	code, out, errs = runCmd(t, "purge", "-db", db, "-older-than", "72h", "-json")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, `"purged": 1`)

	s, err := boltstore.OpenReadOnly(db, nil)
	require.NoError(t, err)
	defer s.Close()
	left, err := s.List(context.Background())
	require.NoError(t, err)
	var keys []string
	for _, r := range left {
		keys = append(keys, r.Key)
	}
	assert.Equal(t, []string{"k-manual", "k-pending", "k-acme", "k-failed"}, keys, "only the old succeeded record went")
}

// A record that cannot be decoded does not stop a purge: the purge deletes what it can,
// leaves that record untouched and names it (stderr; -json: "damaged"), as the dry run does.
func TestPurgeSkipsDamaged(t *testing.T) {
	db := seed(t)
	damage(t, db, "k-manual")
	const named = `idemctl: skipped a record that cannot be decoded (tenant "", key "k-manual"): `
	code, out, errs := runCmd(t, "purge", "-db", db, "-older-than", "72h", "-dry-run")
	require.Equal(t, 0, code, errs)
	assert.Equal(t, "would purge 1 succeeded/failed record(s) last updated before "+testNow.Add(-72*time.Hour).UTC().Format(time.RFC3339)+"\n", out)
	assert.True(t, strings.HasPrefix(errs, named), errs)
	assert.Equal(t, 1, strings.Count(errs, "\n"), errs)

	code, out, errs = runCmd(t, "purge", "-db", db, "-older-than", "72h", "-json")
	require.Equal(t, 0, code, errs)
	var got struct {
		Purged  int          `json:"purged"`
		Damaged []damagedRow `json:"damaged"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	assert.Equal(t, 1, got.Purged)
	require.Len(t, got.Damaged, 1)
	assert.Equal(t, "k-manual", got.Damaged[0].Key)
	assert.Equal(t, named+got.Damaged[0].Error+"\n", errs)

	raw, err := bbolt.Open(db, 0o600, &bbolt.Options{ReadOnly: true})
	require.NoError(t, err)
	defer raw.Close()
	require.NoError(t, raw.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("records"))
		assert.Nil(t, b.Get(append([]byte{0}, "k-ok"...)), "the old succeeded record went")
		assert.Equal(t, []byte(`{"key":`), b.Get(append([]byte{0}, "k-manual"...)), "the damaged one is untouched")
		assert.NotNil(t, b.Get(append([]byte{0}, "k-failed"...)))
		return nil
	}))
}

// While a service holds the file, every command stops after -timeout with a clear message.
func TestLockedFile(t *testing.T) {
	db := seed(t)
	svc, err := boltstore.Open(db, nil)
	require.NoError(t, err)
	defer svc.Close()
	for _, args := range [][]string{{"ls"}, {"show", "k-ok"}, {"stats"}, {"purge", "-older-than", "25h"},
		{"resolve", "k-manual", "-verdict", "executed", "-note", "x"}, {"recover", "-base-url", "http://127.0.0.1:1"}} {
		start := time.Now()
		code, out, errs := runCmd(t, append([]string{args[0], "-db", db, "-timeout", "100ms"}, args[1:]...)...)
		assert.Equal(t, 1, code, args)
		assert.Empty(t, out)
		assert.Contains(t, errs, "is in use by another process", args)
		assert.Less(t, time.Since(start), 5*time.Second)
	}
}

// A -db path where no keystore exists (a typo) is refused by every command, naming the path:
// the write commands do not create an empty keystore there and report nothing to do.
func TestMissingFile(t *testing.T) {
	dir := t.TempDir()
	for i, args := range [][]string{{"ls"}, {"show", "k-ok"}, {"stats"}, {"purge", "-older-than", "72h"},
		{"purge", "-older-than", "72h", "-dry-run"}, {"resolve", "k-manual", "-verdict", "executed", "-note", "x"},
		{"recover", "-base-url", "http://127.0.0.1:1"}} {
		db := filepath.Join(dir, fmt.Sprintf("typo%d.db", i))
		code, out, errs := runCmd(t, append([]string{args[0], "-db", db}, args[1:]...)...)
		assert.Equal(t, 1, code, args)
		assert.Empty(t, out, args)
		assert.Equal(t, "idemctl: -db "+db+": no such keystore file (idemctl never creates one: check the path)\n", errs, args)
		_, err := os.Stat(db)
		assert.True(t, errors.Is(err, fs.ErrNotExist), "%v created %s", args, db)
	}
}

func TestUsage(t *testing.T) {
	db := seed(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"ls"}, "exactly one of -db FILE, -dsn DSN or -url ADMIN_URL"},
		{[]string{"ls", "-db", db, "-url", "http://admin"}, "exactly one of"},
		{[]string{"ls", "-url", "admin:9090"}, `-url "admin:9090" is not an absolute http(s) URL`},
		{[]string{"ls", "-dsn", "::nonsense"}, "-dsn is not a Postgres connection string"},
		{[]string{"ls", "-url", "http://admin", "-token-env", "IDEMCTL_TEST_UNSET"}, "-token-env IDEMCTL_TEST_UNSET: the environment variable IDEMCTL_TEST_UNSET is not set"},
		{[]string{"resolve", "-db", db}, "one KEY or -intent"},
		{[]string{"resolve", "-db", db, "k-manual"}, `-verdict "": want executed or not_executed`},
		{[]string{"resolve", "-db", db, "k-manual", "-verdict", "executed"}, "-note is required"},
		{[]string{"resolve", "-db", db, "k-manual", "-verdict", "not_executed", "-note", "x", "-status", "200"}, "only with -verdict executed"},
		{[]string{"resolve", "-db", db, "k-manual", "-verdict", "executed", "-note", "x", "-status", "700"}, "-status 700 is not an HTTP status"},
		{[]string{"recover", "-db", db}, "-base-url URL is required"},
		{[]string{"recover", "-db", db, "-base-url", "http://api", "-auth-env", "IDEMCTL_TEST_UNSET"}, "environment variable IDEMCTL_TEST_UNSET is not set"},
		{[]string{"recover", "-db", db, "-base-url", "api.example.com"}, "BaseURL"},
		{[]string{"migrate", "-db", db}, "migrate works on a Postgres keystore"},
		{[]string{"ls", "-db", db, "-state", "done"}, `unknown state "done"`},
		{[]string{"show", "-db", db}, "one KEY or -intent"},
		{[]string{"purge", "-db", db}, "-older-than"},
		{[]string{"purge", "-db", db, "-older-than", "1h"}, "shorter than -key-ttl 24h0m0s"},
		{[]string{"purge", "-db", db, "-older-than", "2h", "-key-ttl", "3h"}, "shorter than -key-ttl 3h0m0s"},
		{[]string{"frobnicate"}, "unknown command"},
	}
	for _, tt := range tests {
		code, _, errs := runCmd(t, tt.args...)
		assert.Equal(t, 2, code, tt.args)
		assert.Contains(t, errs, tt.want, tt.args)
	}
	code, _, errs := runCmd(t)
	assert.Equal(t, 2, code)
	assert.Contains(t, errs, "commands:")
	code, _, _ = runCmd(t, "ls", "-h")
	assert.Equal(t, 0, code)
}

// A record that cannot be decoded (its JSON damaged in the bbolt file) is named on stderr by
// ls (which exits 1) and counted by stats, while every other record is listed and counted;
// the file keeps its bytes.
func TestDamagedRecordIsSkippedAndNamed(t *testing.T) {
	db := seed(t)
	garbage := []byte(`{"key":`)
	raw, err := bbolt.Open(db, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, raw.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket([]byte("records")).Put(append([]byte{0}, "k-ok"...), garbage)
	}))
	require.NoError(t, raw.Close())

	code, out, errs := runCmd(t, "ls", "-db", db)
	require.Equal(t, 1, code, errs) // the others listed, but not every record
	for _, k := range []string{"k-pending", "k-manual", "k-failed", "k-acme"} {
		assert.Contains(t, out, k)
	}
	assert.NotContains(t, out, "k-ok")
	assert.Contains(t, errs, `idemctl: skipped a record that cannot be decoded (tenant "", key "k-ok"): `)

	code, out, errs = runCmd(t, "stats", "-db", db, "-json")
	require.Equal(t, 0, code, errs)
	assert.JSONEq(t, `{"records":{"total":4,"damaged":1,"tenants":2,"oldest_pending_seconds":7200,"oldest_manual_seconds":108000,
		"by_state":{"pending":2,"manual":1,"succeeded":0,"failed":1}}}`, out)

	code, out, errs = runCmd(t, "purge", "-db", db, "-older-than", "24h", "-dry-run")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "would purge 0 succeeded/failed record(s)")

	raw, err = bbolt.Open(db, 0o600, &bbolt.Options{ReadOnly: true})
	require.NoError(t, err)
	defer raw.Close()
	require.NoError(t, raw.View(func(tx *bbolt.Tx) error {
		assert.Equal(t, garbage, tx.Bucket([]byte("records")).Get(append([]byte{0}, "k-ok"...)))
		return nil
	}))
}
