package boltstore_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
	"github.com/idemkit/idem/keystore/keystoretest"
)

// Tests of damaged files: whatever the damage, Open, or the reads and writes that touch the
// damaged part, return ErrCorrupt (ErrNotKeystore when no bbolt header is left), and the
// process neither crashes nor hangs. Opening and reading leave the file byte for byte as it was.

const damagedRecords = 300

// damagedRecord is record i of the store that the tests damage; every tenth has a body larger
// than a page, so that its value spans overflow pages.
func damagedRecord(i int) *keystore.Record {
	rec := record("t", fmt.Sprintf("k-%03d", i))
	rec.CreatedAt = rec.CreatedAt.Add(time.Duration(i) * time.Second)
	rec.UpdatedAt = rec.CreatedAt
	size := 100 + i*53%900
	if i%10 == 0 {
		size = 6000
	}
	rec.Request.Body = bytes.Repeat([]byte{byte('a' + i%26)}, size)
	return rec
}

// bboltLayout is what the tests need to know of a bbolt file to damage it precisely.
type bboltLayout struct {
	ps, hwm, root, freelist int
	txid                    uint64
	metaPage                int   // the meta page of the last commit (0 or 1)
	records                 int   // root page of the records bucket, a branch page
	leaves                  []int // leaf pages of the buckets
}

var ne = binary.NativeEndian

func readLayout(t *testing.T, path string) bboltLayout {
	t.Helper()
	b := readFile(t, path)
	var l bboltLayout
	l.ps = int(ne.Uint32(b[16+8:]))
	for i := range 2 {
		m := b[i*l.ps+16:]
		if txid := ne.Uint64(m[48:]); i == 0 || txid > l.txid {
			l.txid, l.metaPage = txid, i
			l.root, l.freelist, l.hwm = int(ne.Uint64(m[16:])), int(ne.Uint64(m[32:])), int(ne.Uint64(m[40:]))
		}
	}
	db, err := bbolt.Open(path, 0, &bbolt.Options{ReadOnly: true, PreLoadFreelist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bbolt.Tx) error {
		for id := 2; id < l.hwm; id++ {
			info, err := tx.Page(id)
			if err != nil {
				return err
			}
			if info.Type == "leaf" && id != l.root {
				l.leaves = append(l.leaves, id)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The records bucket: an element of the root leaf, whose value starts with its root page.
	root := b[l.root*l.ps:]
	for i := range int(ne.Uint16(root[10:])) {
		if string(leafKey(root, i)) == "records" {
			l.records = int(ne.Uint64(leafValue(root, i)))
		}
	}
	if l.records == 0 || ne.Uint16(b[l.records*l.ps+8:]) != 0x01 {
		t.Fatalf("store too small for the tests: records root %d is not a branch page", l.records)
	}
	return l
}

// leafKey and leafValue return element i of the leaf page that starts p.
func leafKey(p []byte, i int) []byte {
	el := 16 + 16*i
	pos, ksize := int(ne.Uint32(p[el+4:])), int(ne.Uint32(p[el+8:]))
	return p[el+pos : el+pos+ksize]
}

func leafValue(p []byte, i int) []byte {
	el := 16 + 16*i
	pos, ksize, vsize := int(ne.Uint32(p[el+4:])), int(ne.Uint32(p[el+8:])), int(ne.Uint32(p[el+12:]))
	return p[el+pos+ksize : el+pos+ksize+vsize]
}

// find returns the leaf page of the file b that holds key (scope "t", record or intent key)
// and its index there.
func find(t *testing.T, b []byte, l bboltLayout, key string) (page, index int) {
	t.Helper()
	for _, id := range l.leaves {
		p := b[id*l.ps:]
		for i := range int(ne.Uint16(p[10:])) {
			if string(leafKey(p, i)) == "\x01t"+key {
				return id, i
			}
		}
	}
	t.Fatalf("key %s not found in the leaves", key)
	return 0, 0
}

// valueOffset returns the offset in the file b of the value of record key.
func valueOffset(t *testing.T, b []byte, l bboltLayout, key string) int {
	t.Helper()
	id, i := find(t, b, l, key)
	el := 16 + 16*i
	return id*l.ps + el + int(ne.Uint32(b[id*l.ps+el+4:])) + int(ne.Uint32(b[id*l.ps+el+8:]))
}

// buildDamageBase writes the store that the tests damage and returns its path. The last write
// creates "k-last", so that falling back to the meta page before it loses just that record.
func buildDamageBase(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "base.db")
	// A written freelist, so that the cases can damage it; the stores that read the damaged
	// copies use the default options (a freelist found in the file is read and checked).
	s := open(t, path, &boltstore.Options{SyncFreelist: true})
	// Concurrent writers share commits: a faster test. (The pages that hold a record differ
	// from run to run anyway: bbolt's freelist hands pages out in map order.)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < damagedRecords; i += 8 {
				if err := s.Create(bg, damagedRecord(i)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for g := range 8 {
		wg.Go(func() {
			for i := 7 * g; i < damagedRecords; i += 7 * 8 { // free pages, and a freelist that lists them
				rec := damagedRecord(i)
				rec.State, rec.Response = keystore.StateSucceeded, &keystore.Response{StatusCode: 201}
				if err := s.Update(bg, rec); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if err := s.Create(bg, record("t", "k-last")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// expected holds what a damaged store must still return: every record, by key.
func expected() map[string]*keystore.Record {
	want := map[string]*keystore.Record{"k-last": record("t", "k-last")}
	for i := range damagedRecords {
		rec := damagedRecord(i)
		if i%7 == 0 {
			rec.State, rec.Response = keystore.StateSucceeded, &keystore.Response{StatusCode: 201}
		}
		want[rec.Key] = rec
	}
	return want
}

// Outcomes of a damage.
const (
	openCorrupt     = iota // Open returns ErrCorrupt
	openNotKeystore        // Open returns ErrNotKeystore
	readCorrupt            // Open works (the pages are sound), the damaged records return ErrCorrupt
	intact                 // Open works and every record reads back
)

func TestDamagedFile(t *testing.T) {
	start := time.Now()
	basePath := buildDamageBase(t)
	base := readFile(t, basePath)
	l := readLayout(t, basePath)
	// Which page holds what differs from run to run: the damage is aimed at the pages that hold
	// given records, chosen with a fixed seed.
	t.Logf("base: %d bytes, %d pages of %d bytes, built in %v", len(base), l.hwm, l.ps, time.Since(start))
	want := expected()
	rnd := rand.New(rand.NewPCG(7, 11))
	randomPage := func(b []byte, id int) {
		for i := range l.ps {
			b[id*l.ps+i] = byte(rnd.Uint32())
		}
	}
	truncate := func(n int) func(b []byte) []byte { return func(b []byte) []byte { return b[:n] } }
	need := l.hwm * l.ps

	type damage struct {
		name    string
		damage  func(b []byte) []byte
		outcome int
		msg     []string // substrings of the error
		bad     []string // keys whose Get and GetByIntent must return ErrCorrupt
		missing []string // keys that are gone
	}
	cases := []damage{
		{name: "truncated at 13656", damage: truncate(13656), outcome: openCorrupt, msg: []string{"13656", strconv.Itoa(need)}},
		{name: "truncated to the meta pages", damage: truncate(2 * l.ps), outcome: openCorrupt, msg: []string{strconv.Itoa(2 * l.ps), strconv.Itoa(need)}},
		{name: "truncated at page 3", damage: truncate(3 * l.ps), outcome: openCorrupt},
		{name: "truncated at half", damage: truncate(l.hwm / 2 * l.ps), outcome: openCorrupt},
		{name: "truncated inside a page", damage: truncate(l.hwm/2*l.ps + 1234), outcome: openCorrupt},
		{name: "last page missing", damage: truncate(need - l.ps), outcome: openCorrupt},
		{name: "one byte short", damage: truncate(need - 1), outcome: openCorrupt, msg: []string{strconv.Itoa(need - 1), strconv.Itoa(need)}},
		{name: "truncated inside the meta pages", damage: truncate(l.ps + 100), outcome: openCorrupt},
		{name: "truncated to 100 bytes", damage: truncate(100), outcome: openCorrupt},
		{name: "truncated to 10 bytes", damage: truncate(10), outcome: openNotKeystore},
		{name: "space after the last page cut", damage: truncate(need), outcome: intact},

		{name: "root page random", damage: func(b []byte) []byte { randomPage(b, l.root); return b }, outcome: openCorrupt},
		{name: "freelist page random", damage: func(b []byte) []byte { randomPage(b, l.freelist); return b }, outcome: openCorrupt},
		{name: "records root page random", damage: func(b []byte) []byte { randomPage(b, l.records); return b }, outcome: openCorrupt},
		{name: "root leaf empty", outcome: openCorrupt, msg: []string{"no bucket"}, damage: func(b []byte) []byte {
			ne.PutUint16(b[l.root*l.ps+10:], 0) // the old code made a new keystore of it, losing every record
			return b
		}},
		{name: "branch points at itself", outcome: openCorrupt, msg: []string{"referenced twice"}, damage: func(b []byte) []byte {
			ne.PutUint64(b[l.records*l.ps+16+8:], uint64(l.records))
			return b
		}},
		// One byte of a leaf's first key, lowered below the key its parent branch has for the
		// leaf: the page alone is in order. bbolt's own check (when it rebuilds a freelist not
		// written in the file) panicked on it with its checking goroutine still running, which
		// then faulted and killed the process.
		{name: "leaf's first key below its parent's key", outcome: openCorrupt, msg: []string{"below the parent's key"}, damage: func(b []byte) []byte {
			br := b[l.records*l.ps:]
			child := int(ne.Uint64(br[16+16+8:])) // element 1 of the records branch
			p := b[child*l.ps:]
			if ne.Uint16(p[8:]) != 0x02 {
				t.Fatalf("child %d of the records branch is not a leaf", child)
			}
			k := leafKey(p, 0)
			k[len(k)-1]--
			return b
		}},
		{name: "freelist lists a live page", outcome: openCorrupt, msg: []string{"free"}, damage: func(b []byte) []byte {
			p := b[l.freelist*l.ps:]
			if ne.Uint16(p[10:]) == 0 {
				t.Fatal("empty freelist")
			}
			id, _ := find(t, b, l, "k-000")
			ne.PutUint64(p[16:], uint64(id))
			return b
		}},

		{name: "zero meta pages", outcome: openNotKeystore, damage: func(b []byte) []byte {
			clear(b[:2*l.ps])
			return b
		}},
		{name: "both meta checksums", outcome: openCorrupt, damage: func(b []byte) []byte {
			b[16+56] ^= 1
			b[l.ps+16+56] ^= 1
			return b
		}},
		{name: "meta page of the last commit zeroed", outcome: intact, missing: []string{"k-last"}, damage: func(b []byte) []byte {
			clear(b[l.metaPage*l.ps : (l.metaPage+1)*l.ps])
			return b
		}},
		{name: "meta page before the last commit zeroed", outcome: intact, damage: func(b []byte) []byte {
			clear(b[(1-l.metaPage)*l.ps : (2-l.metaPage)*l.ps])
			return b
		}},

		{name: "record value byte", outcome: readCorrupt, bad: []string{"k-123"}, damage: func(b []byte) []byte {
			b[valueOffset(t, b, l, "k-123")+20] = 0
			return b
		}},
		{name: "record value byte in an overflow page", outcome: readCorrupt, bad: []string{"k-120"}, damage: func(b []byte) []byte {
			b[valueOffset(t, b, l, "k-120")+5000] = 0 // in the base64 of the body
			return b
		}},
		{name: "record key names another record", outcome: readCorrupt, bad: []string{"k-201"}, damage: func(b []byte) []byte {
			v := valueOffset(t, b, l, "k-201")
			i := bytes.Index(b[v:v+200], []byte(`"k-201"`))
			b[v+i+5] = '9' // the JSON now names k-209
			return b
		}},
	}
	for range 3 {
		key := fmt.Sprintf("k-%03d", rnd.IntN(damagedRecords))
		cases = append(cases,
			damage{name: "leaf of " + key + " random", outcome: openCorrupt, damage: func(b []byte) []byte {
				id, _ := find(t, b, l, key)
				randomPage(b, id)
				return b
			}},
			damage{name: "leaf of intent-" + key + " random", outcome: openCorrupt, damage: func(b []byte) []byte {
				id, _ := find(t, b, l, "intent-"+key)
				randomPage(b, id)
				return b
			}},
			damage{name: "leaf of intent-" + key + " random after its header", outcome: openCorrupt, damage: func(b []byte) []byte {
				id, _ := find(t, b, l, "intent-"+key)
				for i := 16; i < l.ps; i++ {
					b[id*l.ps+i] = byte(rnd.Uint32())
				}
				return b
			}},
			damage{name: "leaf of " + key + " random after its header", outcome: openCorrupt, damage: func(b []byte) []byte {
				id, _ := find(t, b, l, key)
				for i := 16; i < l.ps; i++ {
					b[id*l.ps+i] = byte(rnd.Uint32())
				}
				return b
			}})
	}
	// An element whose key or value lies far past its page: below 2 GiB bbolt would hand the
	// slice out, and reading it fault or find garbage; above, bbolt would panic making it.
	for _, huge := range []struct {
		field int // 1 pos, 2 ksize, 3 vsize
		value uint32
	}{{1, 0x70000000}, {2, 0x70000000}, {3, 0x70000000}, {1, 0xfffffff0}, {2, 0xfffffff0}} {
		key := fmt.Sprintf("k-%03d", rnd.IntN(damagedRecords))
		name := fmt.Sprintf("%s element %s %#x", key, []string{"", "pos", "ksize", "vsize"}[huge.field], huge.value)
		cases = append(cases, damage{name: name, outcome: openCorrupt, msg: []string{"runs past the page"}, damage: func(b []byte) []byte {
			id, el := find(t, b, l, key)
			ne.PutUint32(b[id*l.ps+16+16*el+4*huge.field:], huge.value)
			return b
		}})
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "keys.db")
			write(t, path, c.damage(bytes.Clone(base)))
			before := readFile(t, path)
			s, err := boltstore.Open(path, nil)
			switch c.outcome {
			case openCorrupt, openNotKeystore:
				target := boltstore.ErrCorrupt
				if c.outcome == openNotKeystore {
					target = boltstore.ErrNotKeystore
				}
				if err == nil {
					s.Close()
				}
				wantIs(t, "Open", err, target)
				for _, m := range c.msg {
					if !strings.Contains(err.Error(), m) {
						t.Errorf("Open: %q does not say %q", err, m)
					}
				}
			default:
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				checkReads(t, s, want, c.outcome, c.bad, c.missing)
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			t.Log(err)
			if !bytes.Equal(before, readFile(t, path)) {
				t.Fatal("Open or a read changed the file")
			}
			if debug.SetPanicOnFault(false) {
				t.Fatal("SetPanicOnFault left on")
			}
			if c.outcome == readCorrupt {
				checkWrites(t, path)
			}
		})
	}
}

// checkReads reads every record of s with List, Get and GetByIntent. With readCorrupt, List
// must return ErrCorrupt, else every record in want, except missing. Get and GetByIntent must
// return ErrCorrupt for the records in bad, ErrNotFound for missing, and the others as in
// want.
func checkReads(t *testing.T, s *boltstore.Store, want map[string]*keystore.Record, outcome int, bad, missing []string) {
	t.Helper()
	all, err := s.List(bg)
	t.Logf("List: %v", err)
	switch {
	case outcome == readCorrupt:
		wantIs(t, "List", err, boltstore.ErrCorrupt)
	case err != nil:
		t.Fatalf("List: %v", err)
	case len(all) != len(want)-len(missing):
		t.Fatalf("List: %d records, want %d", len(all), len(want)-len(missing))
	}
	for key, rec := range want {
		for name, get := range map[string]func() (*keystore.Record, error){
			"Get":         func() (*keystore.Record, error) { return s.Get(bg, "t", key) },
			"GetByIntent": func() (*keystore.Record, error) { return s.GetByIntent(bg, "t", rec.Intent) },
		} {
			got, err := get()
			switch {
			case slices.Contains(missing, key):
				wantIs(t, name+" "+key, err, keystore.ErrNotFound)
			case slices.Contains(bad, key):
				wantIs(t, name+" "+key, err, boltstore.ErrCorrupt)
			case err != nil:
				t.Fatalf("%s %s: %v", name, key, err)
			default:
				if d := keystoretest.Diff(rec, got); d != "" {
					t.Fatalf("%s %s: %s", name, key, d)
				}
			}
		}
	}
}

// checkWrites opens the file at path, with a damaged record, and lists it: a damaged record
// does not stop writes, unlike damaged pages (see TestDamagedWhileOpen). Then it writes from
// several goroutines: each write succeeds or returns ErrCorrupt, none hangs, and Close works.
func checkWrites(t *testing.T, path string) {
	t.Helper()
	s := open(t, path, nil)
	_, err := s.List(bg)
	wantIs(t, "List", err, boltstore.ErrCorrupt)
	if err := s.Create(bg, record("t", "new")); err != nil {
		t.Errorf("Create after a damaged record was found: %v", err)
	}
	errs := make(chan error, 41)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			rec := damagedRecord(i * 15)
			rec.Attempts = 1
			errs <- s.Update(bg, rec)
			errs <- s.Create(bg, record("t", fmt.Sprintf("new-%d", i)))
		})
	}
	wg.Go(func() {
		_, err := s.Purge(bg, time.Now())
		errs <- err
	})
	waitOrFail(t, "writes", wg.Wait)
	close(errs)
	for err := range errs {
		if err != nil && !errors.Is(err, boltstore.ErrCorrupt) {
			t.Errorf("write: %v, want nil or ErrCorrupt", err)
		}
	}
	waitOrFail(t, "Close", func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
}

func waitOrFail(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { fn(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s hung", what)
	}
}

// Damage done to the file while it is open escapes Open's check: the reads that touch it
// return ErrCorrupt, writes are refused from then on, and nothing hangs. Cut short, the file
// makes bbolt read its memory map past the end of the file: a SIGBUS that would kill the
// process. A page overwritten makes bbolt's page check panic. A key offset far past its page
// makes bbolt hand out a key in memory that is not mapped: a SIGSEGV.
func TestDamagedWhileOpen(t *testing.T) {
	for name, damage := range map[string]func(t *testing.T, path string, l bboltLayout, b []byte){
		"element offset": func(t *testing.T, path string, l bboltLayout, b []byte) {
			id, el := find(t, b, l, "k-039")
			writeAt(t, path, id*l.ps+16+16*el+4, binary.NativeEndian.AppendUint32(nil, 0x70000000)) // pos
		},
		"truncated": func(t *testing.T, path string, _ bboltLayout, _ []byte) {
			if err := os.Truncate(path, 3*int64(os.Getpagesize())); err != nil {
				t.Fatal(err)
			}
		},
		"page overwritten": func(t *testing.T, path string, l bboltLayout, b []byte) {
			id, _ := find(t, b, l, "k-039")
			writeAt(t, path, id*l.ps, bytes.Repeat([]byte{0xa5}, l.ps))
		},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "keys.db")
			s := open(t, path, nil)
			for i := range 40 {
				if err := s.Create(bg, damagedRecord(i)); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			l, b := readLayout(t, path), readFile(t, path)
			s = open(t, path, nil)
			damage(t, path, l, b)
			_, err := s.List(bg)
			wantIs(t, "List", err, boltstore.ErrCorrupt)
			t.Log(err)
			if _, err = s.Get(bg, "t", "k-039"); !errors.Is(err, keystore.ErrNotFound) { // its key is lost
				wantIs(t, "Get", err, boltstore.ErrCorrupt)
			}
			if debug.SetPanicOnFault(false) {
				t.Fatal("SetPanicOnFault left on")
			}
			waitOrFail(t, "writes", func() {
				rec := damagedRecord(5)
				rec.Attempts = 2
				err := s.Update(bg, rec)
				wantIs(t, "Update", err, boltstore.ErrCorrupt)
				if !strings.Contains(err.Error(), "write refused") {
					t.Errorf("Update: %q does not say the write was refused", err)
				}
				_, err = s.Purge(bg, time.Now())
				wantIs(t, "Purge", err, boltstore.ErrCorrupt)
			})
			waitOrFail(t, "Close", func() {
				if err := s.Close(); err != nil {
					t.Error(err)
				}
			})
		})
	}
}

// writeAt writes b at offset off of the file at path, in place.
func writeAt(t *testing.T, path string, off int, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, int64(off)); err != nil {
		t.Fatal(err)
	}
}
