package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/bbolt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemadmin"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
	"github.com/idemkit/idem/keystore/pgstore"
)

func readRecord(t *testing.T, db, scope, key string) *keystore.Record {
	t.Helper()
	s, err := boltstore.OpenReadOnly(db, nil)
	require.NoError(t, err)
	defer s.Close()
	rec, err := s.Get(context.Background(), scope, key)
	require.NoError(t, err)
	return rec
}

func TestResolveFile(t *testing.T) {
	db := seed(t)
	code, out, errs := runCmd(t, "resolve", "-db", db, "-intent", "order-2", "-verdict", "executed",
		"-note", "ops: charge ch_9 in the dashboard, ticket 7", "-status", "201", "-body", `{"id":"ch_9"}`, "-json")
	require.Equal(t, 0, code, errs)
	rec := readRecord(t, db, "", "k-manual")
	assert.Equal(t, keystore.StateSucceeded, rec.State)
	assert.Equal(t, keystore.ReasonExecuted, rec.Reason)
	assert.Equal(t, "ops: charge ch_9 in the dashboard, ticket 7", rec.Note)
	assert.Equal(t, &keystore.Response{StatusCode: 201, Body: []byte(`{"id":"ch_9"}`)}, rec.Response)
	assert.Equal(t, testNow, rec.UpdatedAt)
	var want strings.Builder
	require.NoError(t, writeRecordJSON(&want, rec))
	assert.JSONEq(t, want.String(), out)
	assert.Contains(t, out, `"tenant": ""`, "the tenant under the flag's word")

	// Only a manual record can be resolved; nothing is written otherwise.
	for _, key := range []string{"k-manual", "k-pending"} {
		code, _, errs = runCmd(t, "resolve", "-db", db, key, "-verdict", "not_executed", "-note", "again")
		assert.Equal(t, 1, code)
		assert.Contains(t, errs, `only a manual record can be resolved`)
	}
	assert.Equal(t, keystore.StatePending, readRecord(t, db, "", "k-pending").State)
	code, _, errs = runCmd(t, "resolve", "-db", db, "nope", "-verdict", "executed", "-note", "x")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, `no record for key "nope" in any tenant`)
}

// apiWithAuth is idemtest's payments API behind a check of the Authorization header, which
// records every value it saw.
func apiWithAuth(t *testing.T) (*httptest.Server, *idemtest.Handler, func() []string) {
	h := idemtest.NewHandler(idemtest.Config{})
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { h.Close(); srv.Close() })
	return srv, h, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), seen...) }
}

// addPayment persists a pending record of a real payment the API has never seen.
func addPayment(t *testing.T, s keystore.Store, scope, key, intent string) {
	t.Helper()
	body := []byte(`{"amount":1250,"currency":"EUR","customer":"cus_1","reference":"ref-` + key + `"}`)
	at := testNow.Add(-2 * time.Hour)
	require.NoError(t, s.Create(context.Background(), &keystore.Record{Scope: scope, Key: key, Intent: intent,
		Fingerprint: idem.Fingerprint(http.MethodPost, "/v1/payments", body), State: keystore.StatePending,
		Request: keystore.Request{Method: http.MethodPost, URL: "/v1/payments",
			Header: http.Header{"Content-Type": {"application/json"}}, Body: body},
		CreatedAt: at, UpdatedAt: at}))
}

func TestRecoverFile(t *testing.T) {
	srv, api, seen := apiWithAuth(t)
	db := seed(t)
	s, err := boltstore.Open(db, nil)
	require.NoError(t, err)
	addPayment(t, s, "", "3f0c1d0e-5b8a-4c52-9a55-2b0d6b1f7a10", "order-9")
	require.NoError(t, s.Close())

	t.Setenv("IDEMCTL_TEST_API_KEY", "Bearer sk_test_1")
	code, out, errs := runCmd(t, "recover", "-db", db, "-base-url", srv.URL, "-status-path", idemtest.PaymentsPath+"/operations/{key}",
		"-auth-env", "IDEMCTL_TEST_API_KEY", "-json")
	require.Equal(t, 0, code, errs)
	var got recoverOut
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	// k-ok (100 h) is past the 72 h retention: purged. The real payment is asked about, then
	// sent once with its key; the two seeded pending records hold no valid payment body: the
	// API refuses them (400: malformed, judged on the bytes any earlier request of the key
	// shares), a permanent failure.
	assert.Equal(t, map[string]int{"pending": 3, "skipped": 0, "succeeded": 1, "failed": 2, "manual": 0,
		"unknown": 0, "purged": 1, "resolved": 0}, got.Report)
	require.Len(t, got.Records, 3)
	assert.Equal(t, "3f0c1d0e-5b8a-4c52-9a55-2b0d6b1f7a10", got.Records[0].Record.Key)
	assert.Equal(t, keystore.StateSucceeded, got.Records[0].Record.State)
	assert.Equal(t, 1, api.ExecutionsFor("3f0c1d0e-5b8a-4c52-9a55-2b0d6b1f7a10"))
	for _, v := range seen() {
		assert.Equal(t, "Bearer sk_test_1", v, "every request carries the credential from the environment")
	}
	rec := readRecord(t, db, "", "3f0c1d0e-5b8a-4c52-9a55-2b0d6b1f7a10")
	assert.Equal(t, keystore.StateSucceeded, rec.State)
	assert.Empty(t, rec.Request.Header.Values("Authorization"), "the credential is never persisted")

	code, out, errs = runCmd(t, "recover", "-db", db, "-base-url", srv.URL)
	require.Equal(t, 0, code, errs)
	assert.Equal(t, "pending 0, skipped 0, succeeded 0, failed 0, manual 0, unknown 0, purged 0, resolved 0\n", out)
}

// A pending record may name another host by an absolute URL: recover -auth-env sends the API's
// credential only to -base-url's scheme, host and port, and the other host's request goes
// without it.
func TestRecoverCredentialOnlyForBaseURLHost(t *testing.T) {
	api, _, seenA := apiWithAuth(t)
	var mu sync.Mutex
	var seenB []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seenB = append(seenB, r.Method+" "+r.URL.Path+" Authorization="+r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"pay_b"}`))
	}))
	defer other.Close()
	db := filepath.Join(t.TempDir(), "idem.db")
	s, err := boltstore.Open(db, nil)
	require.NoError(t, err)
	body := []byte(`{"amount":5,"currency":"EUR","customer":"cus_1","reference":"abs-1"}`)
	at := testNow.Add(-time.Hour)
	require.NoError(t, s.Create(context.Background(), &keystore.Record{Key: "k-abs",
		Fingerprint: idem.Fingerprint(http.MethodPost, other.URL+"/v1/payments", body), State: keystore.StatePending,
		Request: keystore.Request{Method: http.MethodPost, URL: other.URL + "/v1/payments", Body: body}, CreatedAt: at, UpdatedAt: at}))
	require.NoError(t, s.Close())

	t.Setenv("IDEMCTL_TEST_API_KEY", "Bearer sk_test_1")
	code, out, errs := runCmd(t, "recover", "-db", db, "-base-url", api.URL+"/", "-status-path", idemtest.PaymentsPath+"/operations/{key}",
		"-auth-env", "IDEMCTL_TEST_API_KEY", "-json")
	require.Equal(t, 0, code, errs)
	var got recoverOut
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, map[string]int{"pending": 1, "skipped": 0, "succeeded": 1, "failed": 0, "manual": 0,
		"unknown": 0, "purged": 0, "resolved": 0}, got.Report)
	assert.Equal(t, []string{"Bearer sk_test_1"}, seenA(), "the status check goes to -base-url, with the credential")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"POST /v1/payments Authorization="}, seenB, "another host never gets the credential")
}

func TestSameOrigin(t *testing.T) {
	base, err := url.Parse("https://API.example.com/v1")
	require.NoError(t, err)
	for u, want := range map[string]bool{
		"https://api.example.com/v1/payments":    true,
		"https://api.example.com:443/x":          true,
		"HTTPS://api.example.com/x":              true,
		"http://api.example.com/v1/payments":     false,
		"https://api.example.com:8443/v1":        false,
		"https://api.example.com.evil.test/v1":   false,
		"https://evil.test/v1?h=api.example.com": false,
	} {
		r, err := url.Parse(u)
		require.NoError(t, err)
		assert.Equal(t, want, sameOrigin(r, base), u)
	}
	assert.False(t, sameOrigin(&url.URL{Scheme: "https", Host: "api.example.com"}, nil))
}

// damage overwrites the stored JSON of (scope "", key) with bytes that do not decode.
func damage(t *testing.T, db, key string) {
	t.Helper()
	raw, err := bbolt.Open(db, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, raw.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket([]byte("records")).Put(append([]byte{0}, key...), []byte(`{"key":`))
	}))
	require.NoError(t, raw.Close())
}

// A record recover cannot decode is skipped, as POST /recover skips it: what the run did to
// every other record is printed, the damaged one is named, and the exit status is 1.
func TestRecoverDamaged(t *testing.T) {
	srv, api, _ := apiWithAuth(t)
	db := seed(t)
	s, err := boltstore.Open(db, nil)
	require.NoError(t, err)
	addPayment(t, s, "", "3f0c1d0e-5b8a-4c52-9a55-2b0d6b1f7a10", "order-9")
	require.NoError(t, s.Close())
	damage(t, db, "k-failed")

	code, out, errs := runCmd(t, "recover", "-db", db, "-base-url", srv.URL, "-status-path", idemtest.PaymentsPath+"/operations/{key}", "-json")
	assert.Equal(t, 1, code)
	var got recoverOut
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	assert.Equal(t, map[string]int{"pending": 3, "skipped": 0, "succeeded": 1, "failed": 2, "manual": 0,
		"unknown": 0, "purged": 1, "resolved": 0}, got.Report)
	require.Len(t, got.Records, 3)
	assert.Equal(t, "3f0c1d0e-5b8a-4c52-9a55-2b0d6b1f7a10", got.Records[0].Record.Key)
	assert.Equal(t, keystore.StateSucceeded, got.Records[0].Record.State)
	require.Len(t, got.Damaged, 1)
	assert.Equal(t, "", got.Damaged[0].Scope)
	assert.Equal(t, "k-failed", got.Damaged[0].Key)
	assert.NotEmpty(t, got.Damaged[0].Error)
	assert.Equal(t, 1, api.ExecutionsFor("3f0c1d0e-5b8a-4c52-9a55-2b0d6b1f7a10"))
	assert.Equal(t, `idemctl: skipped a record that cannot be decoded (tenant "", key "k-failed"): `+got.Damaged[0].Error+"\n"+
		"idemctl: recover skipped 1 record(s) that cannot be decoded, left untouched; every other record was reconciled\n", errs)

	// The table, and the same through a running service's admin handler.
	code, out, errs = runCmd(t, "recover", "-db", db, "-base-url", srv.URL)
	assert.Equal(t, 1, code)
	assert.Equal(t, "pending 0, skipped 0, succeeded 0, failed 0, manual 0, unknown 0, purged 0, resolved 0\n", out)
	assert.Contains(t, errs, `(tenant "", key "k-failed")`)
	admin := adminService(t, db, srv.URL)
	t.Setenv("IDEMCTL_TEST_TOKEN", "t0ken")
	code, out, errs = runCmd(t, "recover", "-url", admin.URL+"/idem", "-token-env", "IDEMCTL_TEST_TOKEN", "-token-header", "X-Admin-Token", "-json")
	assert.Equal(t, 1, code)
	got = recoverOut{}
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got.Damaged, 1)
	assert.Equal(t, "k-failed", got.Damaged[0].Key)
	assert.Contains(t, errs, "recover skipped 1 record(s) that cannot be decoded")
}

// adminService is a running service: it holds the bbolt file and serves the admin handler.
func adminService(t *testing.T, db, apiURL string) *httptest.Server {
	t.Helper()
	s, err := boltstore.Open(db, nil)
	require.NoError(t, err)
	c, err := idem.NewClient(idem.Config{Store: s, BaseURL: apiURL, Now: fixedNow,
		KeyStatusURL: idemtest.PaymentsPath + "/operations/{key}"})
	require.NoError(t, err)
	h := idemadmin.NewHandler(c, idemadmin.Options{Authorize: func(r *http.Request) error {
		if r.Header.Get("X-Admin-Token") != "t0ken" {
			return errors.New("bad admin token")
		}
		return nil
	}, MaxLimit: 2})
	srv := httptest.NewServer(http.StripPrefix("/idem", h))
	t.Cleanup(func() { srv.Close(); s.Close() })
	return srv
}

func TestAdminURL(t *testing.T) {
	api, _, _ := apiWithAuth(t)
	db := seed(t)
	srv := adminService(t, db, api.URL)
	url := srv.URL + "/idem"
	t.Setenv("IDEMCTL_TEST_TOKEN", "t0ken")
	tgt := []string{"-url", url, "-token-env", "IDEMCTL_TEST_TOKEN", "-token-header", "X-Admin-Token"}
	cmd := func(args ...string) (int, string, string) { return runCmd(t, append(args, tgt...)...) }

	// The file is the service's: -db gives up at once, -url works.
	code, _, errs := runCmd(t, "ls", "-db", db, "-timeout", "50ms")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "is in use by another process")

	code, out, errs := cmd("ls", "-json") // 5 records over pages of 2
	require.Equal(t, 0, code, errs)
	var rows []idemadmin.Record
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	var keys []string
	for _, r := range rows {
		keys = append(keys, r.Key)
	}
	assert.Equal(t, []string{"k-ok", "k-manual", "k-pending", "k-acme", "k-failed"}, keys)
	assert.Equal(t, int64(30*3600), rows[1].AgeSeconds)

	code, out, errs = cmd("ls", "-state", "pending,manual", "-min-age", "1h", "-tenant", "")
	require.Equal(t, 0, code, errs)
	assert.Equal(t, 4, len(strings.Split(strings.TrimSpace(out), "\n")), out)

	code, out, errs = cmd("show", "-intent", "order-1", "-tenant", "acme", "-json")
	require.Equal(t, 0, code, errs)
	var rec keystore.Record
	require.NoError(t, json.Unmarshal([]byte(out), &rec))
	assert.Equal(t, "k-acme", rec.Key)
	assert.Equal(t, []byte(`{"amount":12}`), rec.Request.Body)

	code, _, errs = cmd("show", "nope")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, `no record for key "nope" in any tenant`)

	code, out, errs = cmd("stats", "-json")
	require.Equal(t, 0, code, errs)
	var st statsOut
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	assert.Equal(t, 5, st.Records.Total)
	assert.Contains(t, st.Client, "resolved_by_caller")

	code, out, errs = cmd("resolve", "k-manual", "-verdict", "not_executed", "-note", "no charge found, ticket 8")
	require.Equal(t, 0, code, errs)
	assert.Regexp(t, `(?m)^state +failed$`, out)
	assert.Regexp(t, `(?m)^resolution +no charge found, ticket 8$`, out)
	code, _, errs = cmd("resolve", "k-manual", "-verdict", "executed", "-note", "again")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "409 Conflict")
	assert.Contains(t, errs, "only a manual record can be resolved")

	code, out, errs = cmd("recover", "-json")
	require.Equal(t, 0, code, errs)
	var got recoverOut
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, 2, got.Report["pending"])
	assert.Equal(t, 1, got.Report["purged"])
	code, _, errs = cmd("recover", "-base-url", "http://api")
	assert.Equal(t, 2, code)
	assert.Contains(t, errs, "the service's own client configuration applies")
	code, _, errs = cmd("purge", "-older-than", "25h")
	assert.Equal(t, 2, code)
	assert.Contains(t, errs, "purge works on -db or -dsn")

	// A URL without the handler's mount path: net/http's 404 names the likely mistake.
	code, _, errs = runCmd(t, "ls", "-url", srv.URL+"/nothing-here", "-token-env", "IDEMCTL_TEST_TOKEN", "-token-header", "X-Admin-Token")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "is -url the path the admin handler is mounted under")

	// A refused request: no token, or a wrong one.
	code, _, errs = runCmd(t, "ls", "-url", url, "-token-env", "")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "admin endpoint answered 401 Unauthorized: unauthorized: bad admin token")
	t.Setenv("IDEMCTL_TEST_TOKEN", "wrong")
	code, _, errs = cmd("stats")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "401 Unauthorized")
}

// Human tables stay within 100 columns, whatever the lengths of tenants, intents and keys.
func TestTablesFit100Columns(t *testing.T) {
	long := strings.Repeat("x", 200)
	recs := []idemadmin.Record{{Scope: long, Key: long, Intent: long, State: keystore.StateSucceeded,
		LastStatusCode: 500, Reason: long, AgeSeconds: 9 * 3600}}
	rec := &keystore.Record{Key: long, Scope: long, Intent: long, Request: keystore.Request{Method: "POST", URL: long,
		Body: []byte(long), Header: http.Header{"X-Long": {long}}}, Error: long, Note: long,
		Response: &keystore.Response{StatusCode: 201, Body: []byte(long)}}
	var b strings.Builder
	require.NoError(t, writeTable(&b, recs))
	require.NoError(t, writeRecord(&b, rec, time.Now()))
	require.NoError(t, writeRecover(&b, recoverOut{Report: map[string]int{"pending": 1000000},
		Records: []recoveredEntry{{Record: recs[0], Error: long}}}))
	for _, line := range strings.Split(b.String(), "\n") {
		assert.LessOrEqual(t, utf8.RuneCountInString(line), 100, line)
	}
	assert.Equal(t, []string{"0s", "45s", "12m30s", "2h05m", "30h", "4d"}, []string{age(-time.Second), age(45 * time.Second),
		age(12*time.Minute + 30*time.Second), age(2*time.Hour + 5*time.Minute), age(30 * time.Hour), age(100 * time.Hour)})
}

// migrate into a search_path whose schema does not exist says which, and to create it first.
func TestMigrateMissingSchema(t *testing.T) {
	dsn := os.Getenv("IDEM_TEST_PG_DSN")
	if dsn == "" {
		t.Skip("IDEM_TEST_PG_DSN not set: skipping the idemctl -dsn test")
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	code, out, errs := runCmd(t, "migrate", "-dsn", dsn+sep+"search_path=idemctl_missing")
	assert.Equal(t, 1, code)
	assert.Empty(t, out)
	assert.Contains(t, errs, `search_path "idemctl_missing" names no existing schema; run CREATE SCHEMA idemctl_missing first`)
}

// The Postgres target: migrate, then every command on -dsn, in a schema of its own.
func TestPostgres(t *testing.T) {
	dsn := os.Getenv("IDEM_TEST_PG_DSN")
	if dsn == "" {
		t.Skip("IDEM_TEST_PG_DSN not set: skipping the idemctl -dsn test")
	}
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	schema := "idemctl_test_" + hex.EncodeToString(b)
	_, err = admin.Exec(ctx, `CREATE SCHEMA `+schema)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := admin.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`)
		assert.NoError(t, err)
		admin.Close()
	})
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	sdsn := dsn + sep + "search_path=" + schema

	code, _, errs := runCmd(t, "ls", "-dsn", sdsn)
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "run idemctl migrate -dsn first")
	code, out, errs := runCmd(t, "migrate", "-dsn", sdsn)
	require.Equal(t, 0, code, errs)
	assert.Equal(t, "idem schema at version 2\n", out)

	cfg, err := pgxpool.ParseConfig(sdsn)
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	s, err := pgstore.Open(ctx, pool, nil)
	require.NoError(t, err)
	seedStore(t, s)

	code, out, errs = runCmd(t, "ls", "-dsn", sdsn, "-state", "pending,manual", "-json")
	require.Equal(t, 0, code, errs)
	var rows []idemadmin.Record
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 3)
	assert.Equal(t, "k-manual", rows[0].Key)

	code, out, errs = runCmd(t, "stats", "-dsn", sdsn, "-json")
	require.Equal(t, 0, code, errs)
	assert.JSONEq(t, `{"records":{"total":5,"damaged":0,"tenants":2,"oldest_pending_seconds":7200,"oldest_manual_seconds":108000,
		"by_state":{"pending":2,"manual":1,"succeeded":1,"failed":1}}}`, out)

	code, _, errs = runCmd(t, "resolve", "-dsn", sdsn, "k-manual", "-verdict", "executed", "-note", "charge found, ticket 9")
	require.Equal(t, 0, code, errs)
	rec, err := s.Get(ctx, "", "k-manual")
	require.NoError(t, err)
	assert.Equal(t, keystore.StateSucceeded, rec.State)
	assert.Equal(t, "charge found, ticket 9", rec.Note)
	require.NotNil(t, rec.Response)
	assert.Equal(t, 200, rec.Response.StatusCode)
	assert.Empty(t, rec.Response.Body)

	code, out, errs = runCmd(t, "show", "-dsn", sdsn, "k-manual")
	require.Equal(t, 0, code, errs)
	assert.Regexp(t, `(?m)^resolution +charge found, ticket 9$`, out)

	// A clock 80 h ahead would delete the fleet's fresh records: refused, nothing deleted (the
	// purge below still finds its one record).
	var skewOut, skewErr bytes.Buffer
	code = run(ctx, []string{"purge", "-dsn", sdsn, "-older-than", "72h"}, &skewOut, &skewErr,
		func() time.Time { return time.Now().Add(80 * time.Hour) })
	assert.Equal(t, 1, code, skewOut.String())
	assert.Contains(t, skewErr.String(), "retention purge refused")
	assert.Contains(t, skewErr.String(), "ahead of the keystore's")

	code, out, errs = runCmd(t, "purge", "-dsn", sdsn, "-older-than", "72h")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "purged 1 ")

	api, _, _ := apiWithAuth(t)
	addPayment(t, s, "acme", "6a1e2c55-0f0b-4f31-8c6e-1d2b3c4d5e6f", "order-7")
	code, out, errs = runCmd(t, "recover", "-dsn", sdsn, "-base-url", api.URL, "-json")
	// The two seeded records were sent before (2 attempts) and their bodies are no payment:
	// a 4xx to a resend says nothing of the earlier attempts, so they stay pending, and the
	// exit status says so.
	assert.Equal(t, 1, code, errs)
	assert.Contains(t, errs, "recover left 2 record(s) pending, outcome still unknown: run recover again later")
	var got recoverOut
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, 3, got.Report["pending"])
	assert.Equal(t, 1, got.Report["succeeded"])
	assert.Equal(t, 2, got.Report["unknown"])
	rec, err = s.Get(ctx, "acme", "6a1e2c55-0f0b-4f31-8c6e-1d2b3c4d5e6f")
	require.NoError(t, err)
	assert.Equal(t, keystore.StateSucceeded, rec.State)
}

// An admin URL that accepts the connection and never answers ends the command after
// -timeout with an error, instead of hanging it.
func TestAdminURLThatNeverAnswers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	t.Setenv("IDEMCTL_TOKEN", "Bearer t0ken")
	done := make(chan struct{})
	var code int
	var errs string
	go func() {
		defer close(done)
		code, _, errs = runCmd(t, "stats", "-url", "http://"+ln.Addr().String()+"/idem", "-timeout", "200ms")
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("idemctl still waiting 10 s after a -timeout of 200ms")
	}
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "admin endpoint")
	assert.Contains(t, errs, "timeout awaiting response headers")
}
