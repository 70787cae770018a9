package boltstore_test

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

const deferredCrashEnv = "IDEM_BOLTSTORE_DEFERRED_CRASH_PATH"

// TestDeferredCrashChild is the child of TestDeferredWritesSurviveAKill: it creates records
// durably and finishes each with UpdateDeferred (flushed every millisecond), printing each key
// once its create returned, until it is killed. Run alone it does nothing.
func TestDeferredCrashChild(t *testing.T) {
	path := os.Getenv(deferredCrashEnv)
	if path == "" {
		t.Skip("the child of TestDeferredWritesSurviveAKill; runs only under it")
	}
	s, err := boltstore.Open(path, &boltstore.Options{FlushDelay: time.Millisecond, SecretHeaders: []string{"X-Sig"}})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	for i := 0; ; i++ {
		rec := crashRecord(i)
		if err := s.Create(bg, rec); err != nil {
			fmt.Println("create:", err)
			os.Exit(2)
		}
		fmt.Println("created", rec.Key)
		if err := s.UpdateDeferred(bg, crashFinal(rec)); err != nil {
			fmt.Println("deferred:", err)
			os.Exit(2)
		}
		rec.Request.Body[0] = 'X' // the caller reuses its memory at once
	}
}

func crashRecord(i int) *keystore.Record {
	rec := record("t", fmt.Sprintf("k%06d", i))
	rec.Request.Header.Set("Authorization", "Bearer sk_live")
	rec.Request.Header["x-sig"] = []string{"a", "b"}
	return rec
}

func crashFinal(rec *keystore.Record) *keystore.Record {
	n := rec.Clone()
	n.State, n.Attempts, n.LastStatusCode = keystore.StateSucceeded, 1, 201
	n.Response = &keystore.Response{StatusCode: 201, Body: []byte(`{"id":"` + rec.Key + `"}`),
		Header: http.Header{"Set-Cookie": {"sid=1"}, "Request-Id": {"r"}}}
	return n
}

// A process killed while deferred final writes are queued or committing loses at most those
// writes: every record it created reads back either as created or as finished, whole, without
// a secret header, and the file verifies clean.
func TestDeferredWritesSurviveAKill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestDeferredCrashChild$")
	cmd.Env = append(os.Environ(), deferredCrashEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var created []string
	sc := bufio.NewScanner(out)
	for sc.Scan() && len(created) < 300 {
		if k, ok := strings.CutPrefix(sc.Text(), "created "); ok {
			created = append(created, k)
		} else {
			t.Errorf("child: %s", sc.Text())
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if len(created) < 300 {
		t.Fatalf("child stopped after %d records", len(created))
	}
	s := open(t, path, &boltstore.Options{SecretHeaders: []string{"X-Sig"}})
	defer s.Close()
	rep, err := s.Verify(bg)
	if err != nil || len(rep.Problems) != 0 {
		t.Fatalf("Verify: %v %v", err, rep.Problems)
	}
	finished := 0
	for i, k := range created {
		got, err := s.Get(bg, "t", k)
		if err != nil {
			t.Fatalf("record %s created before the kill: %v", k, err)
		}
		want := keystore.StoredCopy(crashRecord(i), "X-Sig")
		if got.State == keystore.StateSucceeded {
			want = keystore.StoredCopy(crashFinal(crashRecord(i)), "X-Sig")
			finished++
		}
		for _, r := range []*keystore.Record{got, want} {
			r.CreatedAt, r.UpdatedAt, r.LeaseUntil = r.CreatedAt.UTC(), r.UpdatedAt.UTC(), r.LeaseUntil.UTC()
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("record %s after the kill\n%+v\nwant\n%+v", k, got, want)
		}
	}
	if finished == 0 {
		t.Errorf("no deferred write of %d committed before the kill", len(created))
	}
}
