package idem

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/event"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
	"github.com/idemkit/idem/outcome"
)

const (
	finalChildEnv = "IDEM_FINAL_CHILD" // set in the child: "url|store path"
	finalRef      = "final-0"
)

// finalChild pays once and reports the key, then waits to be killed. Its store flushes a
// deferred write only after an hour, so the kill always loses the final-state write.
func finalChild() int {
	url, rest, _ := strings.Cut(os.Getenv(finalChildEnv), "|")
	path, refused, _ := strings.Cut(rest, "|") // refused: the child's credential is revoked
	store, err := boltstore.Open(path, &boltstore.Options{Timeout: 5 * time.Second, FlushDelay: time.Hour})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: open store:", err)
		return 3
	}
	auth := crashAuth
	if refused != "" {
		auth = "Bearer revoked"
	}
	c, err := NewClient(Config{BaseURL: url, Store: store, KeyStatusURL: statusPath,
		Credentials: func(r *http.Request) error { r.Header.Set("Authorization", auth); return nil }})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 3
	}
	res, err := c.Do(context.Background(), payment(100, finalRef, WithIntent(finalRef)))
	if e, ok := errors.AsType[*OperationError](err); ok && refused != "" && errors.Is(err, ErrPermanent) {
		fmt.Printf("failed %s %d\n", e.Key, e.Attempts)
		select {} // killed here, with whatever write is still queued
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: Do:", err)
		return 3
	}
	fmt.Printf("ok %s %d\n", res.Key, res.Attempts)
	select {} // killed here, the final-state write still queued
}

// A crash right after the answer loses the final-state write, which does not wait for its
// sync: the record is still pending as persisted before the send. Recover must then ask the
// status endpoint, find the payment, record it, and send nothing.
func TestCrashAfterAnswerLosesOnlyTheFinalWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	path := filepath.Join(t.TempDir(), "keys.db")
	srv := idemtest.NewServer(idemtest.Config{})
	defer srv.Close()

	key := runFinalChild(t, srv.URL+"|"+path, "ok")
	require.Equal(t, 1, srv.ExecutionsByReference(finalRef))

	store, err := boltstore.Open(path, nil)
	require.NoError(t, err)
	defer store.Close()
	ctx := context.Background()
	rec, err := store.Get(ctx, "", key)
	require.NoError(t, err)
	require.Equal(t, keystore.StatePending, rec.State, "the final write was lost with the process")
	require.Equal(t, 0, rec.Attempts, "the record is as persisted before the send")

	var sends atomic.Int64
	c, err := NewClient(Config{BaseURL: srv.URL, Store: store, KeyStatusURL: statusPath,
		Credentials: func(r *http.Request) error { r.Header.Set("Authorization", crashAuth); return nil },
		Hooks:       event.Hooks{OnAttempt: func(event.Attempt) { sends.Add(1) }}})
	require.NoError(t, err)
	defer c.Close()
	var got []Reconciled
	rep, err := c.Recover(ctx, func(r Reconciled) { got = append(got, r) })
	require.NoError(t, err)
	assert.Equal(t, RecoverReport{Pending: 1, Succeeded: 1}, rep)
	assert.Zero(t, sends.Load(), "nothing resent")
	require.Len(t, got, 1)
	require.NotNil(t, got[0].Result)
	assert.Equal(t, outcome.SourceKeyStatus, got[0].Result.Source)
	assert.Equal(t, 1, got[0].Result.KeyStatusChecks)
	assert.Equal(t, 1, srv.ExecutionsByReference(finalRef), "executed exactly once")
	rec, err = store.Get(ctx, "", key)
	require.NoError(t, err)
	assert.Equal(t, keystore.StateSucceeded, rec.State)
	assert.Equal(t, http.StatusCreated, rec.LastStatusCode)
}

// The same crash after a refusal the server did not store (a 401 before execution): the
// failed record was on disk before Do returned, so the restarted process's Recover sends
// nothing; had that write waited for a flush, Recover would have found the record pending,
// heard "not found" from the status endpoint, and charged the payment the application was
// told had failed.
func TestCrashAfterRefusalKeepsTheFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	path := filepath.Join(t.TempDir(), "keys.db")
	api := idemtest.NewServer(idemtest.Config{})
	defer api.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != crashAuth {
			w.WriteHeader(http.StatusUnauthorized) // refused before the API: nothing stored
			return
		}
		api.Handler.ServeHTTP(w, r)
	}))
	defer srv.Close()

	key := runFinalChild(t, srv.URL+"|"+path+"|refused", "failed")

	store, err := boltstore.Open(path, nil)
	require.NoError(t, err)
	defer store.Close()
	ctx := context.Background()
	rec, err := store.Get(ctx, "", key)
	require.NoError(t, err)
	require.Equal(t, keystore.StateFailed, rec.State, "the failure was on disk before Do returned")
	assert.Equal(t, http.StatusUnauthorized, rec.LastStatusCode)

	var sends atomic.Int64
	c, err := NewClient(Config{BaseURL: srv.URL, Store: store, KeyStatusURL: statusPath,
		Credentials: func(r *http.Request) error { r.Header.Set("Authorization", crashAuth); return nil },
		Hooks:       event.Hooks{OnAttempt: func(event.Attempt) { sends.Add(1) }}})
	require.NoError(t, err)
	defer c.Close()
	rep, err := c.Recover(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, RecoverReport{}, rep)
	assert.Zero(t, sends.Load(), "nothing resent")
	assert.Zero(t, api.ExecutionsByReference(finalRef), "never executed")
}

// runFinalChild starts finalChild with env (its finalChildEnv value), waits for its one line
// ("ok KEY N" or "failed KEY N", word is the first field), kills it, and returns the key
// after checking that one attempt was made.
func runFinalChild(t *testing.T, env, word string) string {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), finalChildEnv+"="+env)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	var key string
	var attempts int
	_, err = fmt.Sscanf(line, word+" %s %d", &key, &attempts)
	require.NoError(t, err, "child said %q", line)
	require.Equal(t, 1, attempts)
	return key
}
