package boltstore_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

func ring(t testing.TB, current string, ids ...string) *keystore.KeyRing {
	t.Helper()
	keys := map[string][]byte{}
	for _, id := range ids {
		keys[id] = bytes.Repeat([]byte(id[len(id)-1:]), 32)
	}
	r, err := keystore.NewKeyRing(current, keys)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// With a key ring the bodies never reach the file in plaintext; a ring that also holds the
// old key reads old records (rotation, nothing rewritten), and a write seals with the new key.
// A missing or wrong key is a typed error.
func TestSealedBodies(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	s := open(t, path, &boltstore.Options{KeyRing: ring(t, "k1", "k1")})
	rec := record("t", "k-1")
	rec.Request.Body = []byte(`{"card":"4242424242424242"}`)
	if err := s.Create(bg, rec); err != nil {
		t.Fatal(err)
	}
	done := rec.Clone()
	done.State, done.Response = keystore.StateSucceeded, &keystore.Response{StatusCode: 200, Body: []byte(`{"client_secret":"pi_secret_xyz"}`)}
	if err := s.Update(bg, done); err != nil {
		t.Fatal(err)
	}
	plainRec := record("t", "k-plain") // written before the ring: stays readable
	_ = s.Close()
	file := readFile(t, path)
	for _, secret := range []string{"4242424242424242", "pi_secret_xyz"} {
		if bytes.Contains(file, []byte(secret)) {
			t.Fatalf("%s is in the file in plaintext", secret)
		}
	}

	s = open(t, path, &boltstore.Options{KeyRing: ring(t, "k2", "k1", "k2")}) // rotated
	got, err := s.Get(bg, "t", "k-1")
	if err != nil || !bytes.Equal(got.Request.Body, rec.Request.Body) || !bytes.Equal(got.Response.Body, done.Response.Body) {
		t.Fatalf("rotated ring: Get = %+v, %v", got, err)
	}
	if err := s.Update(bg, got); err != nil { // now sealed with k2
		t.Fatal(err)
	}
	_ = s.Close()

	s = open(t, path, nil) // a record written without a ring, beside sealed ones
	if err := s.Create(bg, plainRec); err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(bg, "t", "k-1")
	wantIs(t, "Get without a ring", err, keystore.ErrKeyUnknown)
	_, err = s.GetByIntent(bg, "t", "intent-k-1")
	wantIs(t, "GetByIntent without a ring", err, keystore.ErrKeyUnknown)
	_ = s.Close()

	s = open(t, path, &boltstore.Options{KeyRing: ring(t, "k2", "k2")}) // k1 retired: k-1 was rewritten
	if got, err := s.Get(bg, "t", "k-1"); err != nil || !bytes.Equal(got.Request.Body, rec.Request.Body) {
		t.Fatalf("k2 only: Get = %v, %v", got, err)
	}
	if got, err := s.Get(bg, "t", "k-plain"); err != nil || !bytes.Equal(got.Request.Body, plainRec.Request.Body) {
		t.Fatalf("plain record with a ring: Get = %v, %v", got, err)
	}
	if rep, err := s.Verify(bg); err != nil || len(rep.Problems) != 0 || rep.Records != 2 {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
	_ = s.Close()

	wrong, _ := keystore.NewKeyRing("k2", map[string][]byte{"k2": bytes.Repeat([]byte{7}, 32)})
	s = open(t, path, &boltstore.Options{KeyRing: wrong})
	defer s.Close()
	_, err = s.Get(bg, "t", "k-1")
	wantIs(t, "Get with another key under k2", err, keystore.ErrKeyWrong)
}

// A client whose keystore cannot open a record's bodies sends nothing for its intent: the
// pending payment is not resent with a body it cannot read, nor a new key minted.
func TestClientWithoutTheKeySendsNothing(t *testing.T) {
	var sent atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	defer api.Close()
	path := filepath.Join(t.TempDir(), "keys.db")
	s := open(t, path, &boltstore.Options{KeyRing: ring(t, "k1", "k1")})
	pending := record("", "k-pending") // a payment whose process died before its answer
	pending.Intent, pending.NotExecuted = "ord-pending", true
	pending.Request.URL = "/v1/payments"
	if err := s.Create(bg, pending); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()

	for _, r := range []*keystore.KeyRing{nil, ring(t, "k9", "k9")} {
		s := open(t, path, &boltstore.Options{KeyRing: r})
		c, err := idem.NewClient(idem.Config{BaseURL: api.URL, Store: s})
		if err != nil {
			t.Fatal(err)
		}
		op := idem.NewOperation(http.MethodPost, "/v1/payments", pending.Request.Body, idem.WithIntent("ord-pending"))
		_, err = c.Do(context.Background(), op)
		wantIs(t, fmt.Sprintf("Do with ring %v", r), err, keystore.ErrKeyUnknown)
		_, err = c.Recover(context.Background(), nil)
		if err == nil {
			t.Fatal("Recover without the key reported nothing")
		}
		_ = s.Close()
	}
	if n := sent.Load(); n != 0 {
		t.Fatalf("%d requests sent without the key", n)
	}
}
