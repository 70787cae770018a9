package boltstore_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
	"github.com/idemkit/idem/keystore/keystoretest"
)

var bg = context.Background()

func TestConformance(t *testing.T) {
	keystoretest.Run(t, func(t *testing.T) keystore.Store {
		return open(t, filepath.Join(t.TempDir(), "keys.db"), nil)
	})
}

func open(t *testing.T, path string, opts *boltstore.Options) *boltstore.Store {
	t.Helper()
	s, err := boltstore.Open(path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func record(scope, key string) *keystore.Record {
	at := time.Date(2025, 1, 2, 3, 4, 5, 600700800, time.FixedZone("", -7*3600))
	return &keystore.Record{
		Scope: scope, Key: key, Intent: "intent-" + key, Fingerprint: "fp-" + key,
		Request: keystore.Request{
			Method: http.MethodPost, URL: "/v1/charges",
			Header: http.Header{"Content-Type": {"application/json"}},
			Body:   []byte(`{"amount":1000,"key":"` + key + `"}` + "\x00\xff"),
		},
		State: keystore.StatePending, CreatedAt: at, UpdatedAt: at,
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFileMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	s := open(t, path, nil)
	defer s.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
}

// dump returns every key and value in every bucket of a closed keystore file.
func dump(t *testing.T, path string) map[string]string {
	t.Helper()
	db, err := bbolt.Open(path, 0, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[string]string{}
	err = db.View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bbolt.Bucket) error {
			return b.ForEach(func(k, v []byte) error {
				out[string(name)+"/"+string(k)] = string(v)
				return nil
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestReopenKeepsRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	s := open(t, path, nil)
	var want []*keystore.Record
	for i := range 50 {
		rec := record(fmt.Sprintf("scope-%d", i%3), fmt.Sprintf("key-%03d", i))
		rec.CreatedAt = rec.CreatedAt.Add(time.Duration(i) * time.Nanosecond)
		if err := s.Create(bg, rec); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			rec.State, rec.Attempts, rec.LastStatusCode = keystore.StateSucceeded, 2, 201
			rec.Response = &keystore.Response{StatusCode: 201, Header: http.Header{"X-Id": {"1", "2"}}, Body: []byte{0, 1, 2, 255}}
			rec.UpdatedAt = time.Now()
			if err := s.Update(bg, rec); err != nil {
				t.Fatal(err)
			}
		}
		want = append(want, rec)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before := dump(t, path)
	s = open(t, path, nil)
	for _, rec := range want {
		got, err := s.Get(bg, rec.Scope, rec.Key)
		if err != nil {
			t.Fatal(err)
		}
		if d := keystoretest.Diff(rec, got); d != "" {
			t.Fatalf("%s after reopen: %s", rec.Key, d)
		}
	}
	all, err := s.List(bg)
	if err != nil || len(all) != len(want) {
		t.Fatalf("List after reopen: %d, %v", len(all), err)
	}
	s.Close()
	after := dump(t, path)
	if len(before) != len(after) {
		t.Fatalf("%d entries before reopen, %d after", len(before), len(after))
	}
	for k, v := range before {
		if after[k] != v {
			t.Fatalf("entry %q changed across reopen", k)
		}
	}
}

func TestSecretsNotInFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	s := open(t, path, &boltstore.Options{SecretHeaders: []string{"X-Api-Key"}})
	secrets := []string{"AUTHSECRET", "LOWERAUTHSECRET", "COOKIESECRET", "PROXYSECRET", "APIKEYSECRET", "SETCOOKIESECRET", "RESPAPIKEYSECRET"}
	rec := record("t", "k")
	rec.Request.Header.Set("Authorization", "Bearer sk_live_AUTHSECRET")
	rec.Request.Header["authorization"] = []string{"LOWERAUTHSECRET"}
	rec.Request.Header.Set("Cookie", "session=COOKIESECRET")
	rec.Request.Header.Set("Proxy-Authorization", "Basic PROXYSECRET")
	rec.Request.Header["x-api-key"] = []string{"APIKEYSECRET"}
	rec.Request.Header.Set("X-Visible", "VISIBLEMARKER")
	if err := s.Create(bg, rec); err != nil {
		t.Fatal(err)
	}
	rec.State = keystore.StateSucceeded
	rec.Response = &keystore.Response{StatusCode: 200, Header: http.Header{
		"Set-Cookie": {"sid=SETCOOKIESECRET; HttpOnly"},
		"X-Api-Key":  {"RESPAPIKEYSECRET"},
	}}
	if err := s.Update(bg, rec); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	raw := readFile(t, path)
	if !bytes.Contains(raw, []byte("VISIBLEMARKER")) {
		t.Fatal("ordinary header not found in the file: the check below proves nothing")
	}
	for _, secret := range secrets {
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("secret %s found in the file", secret)
		}
	}
}

func TestInvalidUTF8(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "keys.db"), nil)
	defer s.Close()
	for name, change := range map[string]func(r *keystore.Record){
		"key":    func(r *keystore.Record) { r.Key = "k\xff" },
		"scope":  func(r *keystore.Record) { r.Scope = "\xc3" },
		"header": func(r *keystore.Record) { r.Request.Header.Set("X-Latin1", "caf\xe9") },
		"reason": func(r *keystore.Record) { r.Reason = "r\xff" },
		"error":  func(r *keystore.Record) { r.Error = "e\xff" },
		"note":   func(r *keystore.Record) { r.Note = "checked by caf\xe9" },
		"owner":  func(r *keystore.Record) { r.Owner, r.LeaseUntil, r.Fence = "n\xff", time.Now().Add(time.Minute), 1 },
	} {
		rec := record("t", "k")
		change(rec)
		wantIs(t, name, s.Create(bg, rec), keystore.ErrInvalid)
	}
	if _, err := s.Get(bg, "t", "k"); err != keystore.ErrNotFound {
		t.Fatalf("a refused record was stored: %v", err)
	}
}

func TestConcurrentCreatesSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	s := open(t, path, nil)
	const n = 64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			if err := s.Create(bg, record("t", fmt.Sprintf("k%02d", i))); err != nil {
				t.Errorf("Create %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path, nil)
	defer s.Close()
	for i := range n {
		want := record("t", fmt.Sprintf("k%02d", i))
		got, err := s.Get(bg, "t", want.Key)
		if err != nil {
			t.Fatalf("Get %s after reopen: %v", want.Key, err)
		}
		if d := keystoretest.Diff(want, got); d != "" {
			t.Fatalf("%s: %s", want.Key, d)
		}
	}
	all, err := s.List(bg)
	if err != nil || len(all) != n {
		t.Fatalf("List: %d records, %v; want %d", len(all), err, n)
	}
}
