package keystoretest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
)

var bg = context.Background()

func testCreateGet(t *testing.T, s keystore.Store) {
	rec := sample("tenant-1", "key-1")
	rec.Intent = "order-1"
	mustCreate(t, s, rec)
	got := mustGet(t, s, "tenant-1", "key-1")
	wantEqual(t, "Get after Create", rec, got)
	if got == rec {
		t.Fatal("Get returned the caller's pointer")
	}
	_, err := s.Get(bg, "tenant-1", "key-2")
	wantErr(t, "Get of a missing key", err, keystore.ErrNotFound)
}

func testCreateDuplicateKey(t *testing.T, s keystore.Store) {
	first := sample("t", "k")
	mustCreate(t, s, first)
	second := sample("t", "k")
	second.Fingerprint = "other"
	second.Intent = "other-intent"
	wantErr(t, "second Create of the same key", s.Create(bg, second), keystore.ErrExists)
	wantEqual(t, "record after refused Create", first, mustGet(t, s, "t", "k"))
	_, err := s.GetByIntent(bg, "t", "other-intent")
	wantErr(t, "intent of a refused Create", err, keystore.ErrNotFound)
}

func testCreateDuplicateIntent(t *testing.T, s keystore.Store) {
	first := sample("t", "k1")
	first.Intent = "order-9"
	mustCreate(t, s, first)
	second := sample("t", "k2")
	second.Intent = "order-9"
	wantErr(t, "Create with a taken intent", s.Create(bg, second), keystore.ErrExists)
	_, err := s.Get(bg, "t", "k2")
	wantErr(t, "key of a refused Create", err, keystore.ErrNotFound)
	other := sample("t2", "k2")
	other.Intent = "order-9"
	mustCreate(t, s, other) // same intent, other scope
	got, err := s.GetByIntent(bg, "t", "order-9")
	if err != nil {
		t.Fatalf("GetByIntent: %v", err)
	}
	wantEqual(t, "GetByIntent after refused Create", first, got)
}

func testUpdateRoundTrip(t *testing.T, s keystore.Store) {
	rec := sample("t", "k")
	rec.Intent = "order-1"
	mustCreate(t, s, rec)
	steps := []*keystore.Record{
		completed(rec, keystore.StatePending, base.Add(time.Second)),
		completed(rec, keystore.StateSucceeded, base.Add(2*time.Second)),
	}
	steps[0].Response = nil
	steps[0].Attempts = 1
	for i, want := range steps {
		mustUpdate(t, s, want)
		wantEqual(t, fmt.Sprintf("Get after Update %d", i), want, mustGet(t, s, "t", "k"))
	}
	byIntent, err := s.GetByIntent(bg, "t", "order-1")
	if err != nil {
		t.Fatalf("GetByIntent after Update: %v", err)
	}
	wantEqual(t, "GetByIntent after Update", steps[1], byIntent)
}

func testUpdateMissing(t *testing.T, s keystore.Store) {
	wantErr(t, "Update of a missing record", s.Update(bg, sample("t", "k")), keystore.ErrNotFound)
	_, err := s.Get(bg, "t", "k")
	wantErr(t, "Get after a refused Update", err, keystore.ErrNotFound)
}

func testUpdateImmutable(t *testing.T, s keystore.Store) {
	rec := sample("t", "k")
	rec.Intent = "order-1"
	mustCreate(t, s, rec)
	changes := map[string]func(r *keystore.Record){
		"fingerprint":  func(r *keystore.Record) { r.Fingerprint = "changed" },
		"intent":       func(r *keystore.Record) { r.Intent = "order-2" },
		"intent unset": func(r *keystore.Record) { r.Intent = "" },
	}
	for name, change := range changes {
		next := completed(rec, keystore.StateSucceeded, base.Add(time.Hour))
		change(next)
		wantErr(t, "Update changing "+name, s.Update(bg, next), keystore.ErrInvalid)
		wantEqual(t, "record after Update changing "+name, rec, mustGet(t, s, "t", "k"))
	}
}

func testScopeIsolation(t *testing.T, s keystore.Store) {
	// Pairs that a naive scope+key (or scope+intent) concatenation would confuse, bytes that
	// need escaping, the empty scope, and the same key in two tenants.
	ids := [][2]string{
		{"a", "bc"}, {"ab", "c"}, {"", "abc"},
		{"x\x00y", "z"}, {"x", "\x00yz"}, {"p/q", "r"}, {"p", "q/r"},
		{"tenant-1", "same"}, {"tenant-2", "same"},
	}
	for i, id := range ids {
		rec := sample(id[0], id[1])
		rec.Intent = id[1]
		rec.Attempts = i
		mustCreate(t, s, rec)
	}
	for i, id := range ids {
		got := mustGet(t, s, id[0], id[1])
		if got.Scope != id[0] || got.Key != id[1] || got.Attempts != i {
			t.Fatalf("Get(%q, %q) returned (%q, %q, #%d), want #%d", id[0], id[1], got.Scope, got.Key, got.Attempts, i)
		}
		byIntent, err := s.GetByIntent(bg, id[0], id[1])
		if err != nil {
			t.Fatalf("GetByIntent(%q, %q): %v", id[0], id[1], err)
		}
		if byIntent.Attempts != i {
			t.Fatalf("GetByIntent(%q, %q) returned record #%d, want #%d", id[0], id[1], byIntent.Attempts, i)
		}
	}
	// An update in one scope leaves the same key in another scope alone.
	mustUpdate(t, s, completed(mustGet(t, s, "tenant-1", "same"), keystore.StateFailed, base))
	if got := mustGet(t, s, "tenant-2", "same"); got.State != keystore.StatePending {
		t.Fatalf("other scope changed to %q", got.State)
	}
	_, err := s.Get(bg, "tenant-3", "same")
	wantErr(t, "Get in a third scope", err, keystore.ErrNotFound)
	all, err := s.List(bg)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(all) != len(ids) {
		t.Fatalf("List returned %d records, want %d", len(all), len(ids))
	}
}

func testGetByIntent(t *testing.T, s keystore.Store) {
	with := sample("t", "k1")
	with.Intent = "order-1"
	mustCreate(t, s, with)
	mustCreate(t, s, sample("t", "k2")) // no intent
	got, err := s.GetByIntent(bg, "t", "order-1")
	if err != nil {
		t.Fatalf("GetByIntent: %v", err)
	}
	wantEqual(t, "GetByIntent", with, got)
	for _, q := range [][2]string{{"t", "order-2"}, {"t", ""}, {"other", "order-1"}, {"t", "k1"}} {
		_, err := s.GetByIntent(bg, q[0], q[1])
		wantErr(t, fmt.Sprintf("GetByIntent(%q, %q)", q[0], q[1]), err, keystore.ErrNotFound)
	}
}

func testInvalid(t *testing.T, s keystore.Store) {
	bad := map[string]*keystore.Record{
		"nil":          nil,
		"empty key":    sample("t", ""),
		"bad state":    func() *keystore.Record { r := sample("t", "k"); r.State = "done"; return r }(),
		"empty state":  func() *keystore.Record { r := sample("t", "k"); r.State = ""; return r }(),
		"empty method": func() *keystore.Record { r := sample("t", "k"); r.Request.Method = ""; return r }(),
	}
	for name, rec := range bad {
		wantErr(t, "Create "+name, s.Create(bg, rec), keystore.ErrInvalid)
	}
	all, err := s.List(bg)
	if err != nil || len(all) != 0 {
		t.Fatalf("List after invalid Creates: %d records, %v", len(all), err)
	}
	good := sample("t", "k")
	mustCreate(t, s, good)
	for name, rec := range bad {
		wantErr(t, "Update "+name, s.Update(bg, rec), keystore.ErrInvalid)
	}
	wantEqual(t, "record after invalid Updates", good, mustGet(t, s, "t", "k"))
}

func testList(t *testing.T, s keystore.Store) {
	all, err := s.List(bg)
	if err != nil || len(all) != 0 {
		t.Fatalf("List of an empty store: %d records, %v", len(all), err)
	}
	// Created out of order; equal CreatedAt is ordered by key.
	specs := []struct {
		key   string
		at    time.Duration
		state keystore.State
	}{
		{"e", 3 * time.Second, keystore.StatePending},
		{"b", 1 * time.Second, keystore.StateSucceeded},
		{"d", 2 * time.Second, keystore.StatePending},
		{"c", 2 * time.Second, keystore.StateManual},
		{"a", 4 * time.Second, keystore.StateFailed},
	}
	for _, sp := range specs {
		rec := sample("t", sp.key)
		rec.State = sp.state
		rec.CreatedAt = base.Add(sp.at)
		mustCreate(t, s, rec)
	}
	cases := []struct {
		states []keystore.State
		want   string
	}{
		{nil, "bcdea"},
		{[]keystore.State{keystore.StatePending}, "de"},
		{[]keystore.State{keystore.StatePending, keystore.StateManual}, "cde"},
		{[]keystore.State{keystore.StateSucceeded, keystore.StateFailed}, "ba"},
		{[]keystore.State{keystore.StateManual, keystore.StateManual}, "c"},
	}
	for _, c := range cases {
		recs, err := s.List(bg, c.states...)
		if err != nil {
			t.Fatalf("List(%v): %v", c.states, err)
		}
		got := ""
		for _, r := range recs {
			got += r.Key
		}
		if got != c.want {
			t.Fatalf("List(%v) = %q, want %q", c.states, got, c.want)
		}
	}
	full, _ := s.List(bg, keystore.StateManual)
	want := sample("t", "c")
	want.State, want.CreatedAt = keystore.StateManual, base.Add(2*time.Second)
	wantEqual(t, "List record", want, full[0])
}

func testPurge(t *testing.T, s keystore.Store) {
	cutoff := base.Add(time.Hour)
	specs := []struct {
		key     string
		state   keystore.State
		updated time.Duration // relative to cutoff
		purged  bool
	}{
		{"old-succeeded", keystore.StateSucceeded, -time.Minute, true},
		{"old-failed", keystore.StateFailed, -time.Nanosecond, true},
		{"at-cutoff", keystore.StateSucceeded, 0, false},
		{"new-succeeded", keystore.StateSucceeded, time.Minute, false},
		{"old-pending", keystore.StatePending, -time.Minute, false},
		{"old-manual", keystore.StateManual, -time.Minute, false},
	}
	for _, sp := range specs {
		rec := sample("t", sp.key)
		rec.Intent = "intent-" + sp.key
		mustCreate(t, s, rec)
		if sp.state != keystore.StatePending {
			mustUpdate(t, s, completed(rec, sp.state, cutoff.Add(sp.updated)))
		}
	}
	n, err := s.Purge(bg, cutoff)
	if err != nil || n != 2 {
		t.Fatalf("Purge = %d, %v; want 2, nil", n, err)
	}
	for _, sp := range specs {
		_, err := s.Get(bg, "t", sp.key)
		_, ierr := s.GetByIntent(bg, "t", "intent-"+sp.key)
		if sp.purged {
			wantErr(t, "Get of purged "+sp.key, err, keystore.ErrNotFound)
			wantErr(t, "GetByIntent of purged "+sp.key, ierr, keystore.ErrNotFound)
		} else if err != nil || ierr != nil {
			t.Fatalf("kept %s: Get %v, GetByIntent %v", sp.key, err, ierr)
		}
	}
	// A purged intent is free again.
	again := sample("t", "new-key")
	again.Intent = "intent-old-succeeded"
	mustCreate(t, s, again)
	if n, err := s.Purge(bg, cutoff); err != nil || n != 0 {
		t.Fatalf("second Purge = %d, %v; want 0, nil", n, err)
	}
}

func testSecrets(t *testing.T, s keystore.Store) {
	rec := sample("t", "k")
	rec.Request.Header.Set("Authorization", "Bearer sk_live_secret")
	rec.Request.Header.Set("Cookie", "session=abc")
	rec.Request.Header.Set("Proxy-Authorization", "Basic cHJveHk=")
	rec.Request.Header["authorization"] = []string{"Bearer sk_live_lowercase"} // not canonical
	mustCreate(t, s, rec)
	if rec.Request.Header.Get("Authorization") == "" {
		t.Fatal("Create modified the caller's header")
	}
	got := mustGet(t, s, "t", "k")
	for name := range got.Request.Header {
		for _, h := range keystore.CredentialHeaders {
			if strings.EqualFold(name, h) {
				t.Fatalf("stored request keeps %s: %q", name, got.Request.Header[name])
			}
		}
	}
	if got.Request.Header.Get("Content-Type") != "application/json" {
		t.Fatal("ordinary request header lost")
	}
	done := completed(rec, keystore.StateSucceeded, base)
	done.Response.Header.Set("Set-Cookie", "session=xyz; HttpOnly")
	done.Response.Header["set-cookie"] = []string{"other=1"}
	mustUpdate(t, s, done)
	got = mustGet(t, s, "t", "k")
	for name, v := range got.Response.Header {
		if strings.EqualFold(name, "Set-Cookie") {
			t.Fatalf("stored response keeps %s: %q", name, v)
		}
	}
	if v := got.Request.Header.Values("Authorization"); len(v) != 0 {
		t.Fatalf("Update stored Authorization: %q", v)
	}
	if got.Response.Header.Get("Request-Id") != "req_1" {
		t.Fatal("ordinary response header lost")
	}
}

func testCopies(t *testing.T, s keystore.Store) {
	rec := completed(sample("t", "k"), keystore.StateSucceeded, base)
	want := rec.Clone()
	mustCreate(t, s, rec)
	mutate := func(r *keystore.Record) {
		r.State = keystore.StateFailed
		r.Request.Header.Set("Content-Type", "text/plain")
		r.Request.Header["X-Multi"][0] = "mutated"
		r.Request.Body[0] = 'X'
		r.Response.Header.Set("Request-Id", "mutated")
		r.Response.Body[0] = 'X'
		r.Response.StatusCode = 500
	}
	mutate(rec) // the caller's record after Create
	wantEqual(t, "after mutating the created record", want, mustGet(t, s, "t", "k"))
	mutate(mustGet(t, s, "t", "k"))
	wantEqual(t, "after mutating a Get result", want, mustGet(t, s, "t", "k"))
	listed, err := s.List(bg)
	if err != nil || len(listed) != 1 {
		t.Fatalf("List: %d, %v", len(listed), err)
	}
	mutate(listed[0])
	wantEqual(t, "after mutating a List result", want, mustGet(t, s, "t", "k"))
	upd := want.Clone()
	upd.Attempts = 7
	mustUpdate(t, s, upd)
	mutate(upd)
	upd = want.Clone()
	upd.Attempts = 7
	wantEqual(t, "after mutating the updated record", upd, mustGet(t, s, "t", "k"))
}

func testClosed(t *testing.T, s keystore.Store) {
	rec := sample("t", "k")
	mustCreate(t, s, rec)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	_, err := s.Get(bg, "t", "k")
	wantErr(t, "Get after Close", err, keystore.ErrClosed)
	_, err = s.GetByIntent(bg, "t", "i")
	wantErr(t, "GetByIntent after Close", err, keystore.ErrClosed)
	wantErr(t, "Create after Close", s.Create(bg, sample("t", "k2")), keystore.ErrClosed)
	wantErr(t, "Update after Close", s.Update(bg, rec), keystore.ErrClosed)
	_, err = s.List(bg)
	wantErr(t, "List after Close", err, keystore.ErrClosed)
	_, err = s.Purge(bg, time.Now())
	wantErr(t, "Purge after Close", err, keystore.ErrClosed)
	wantErr(t, "second Close", s.Close(), keystore.ErrClosed)
}

func testContextCanceled(t *testing.T, s keystore.Store) {
	rec := sample("t", "k")
	mustCreate(t, s, rec)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	wantErr(t, "Create", s.Create(ctx, sample("t", "k2")), context.Canceled)
	wantErr(t, "Update", s.Update(ctx, completed(rec, keystore.StateFailed, base)), context.Canceled)
	_, err := s.Get(ctx, "t", "k")
	wantErr(t, "Get", err, context.Canceled)
	_, err = s.GetByIntent(ctx, "t", "i")
	wantErr(t, "GetByIntent", err, context.Canceled)
	_, err = s.List(ctx)
	wantErr(t, "List", err, context.Canceled)
	_, err = s.Purge(ctx, base.Add(time.Hour))
	wantErr(t, "Purge", err, context.Canceled)
	_, err = s.Get(bg, "t", "k2")
	wantErr(t, "Get of a cancelled Create", err, keystore.ErrNotFound)
	wantEqual(t, "record after a cancelled Update", rec, mustGet(t, s, "t", "k"))
}
