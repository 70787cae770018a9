// Command restart shows, step by step, what idem does for a process that dies in the middle
// of a payment: the key is on disk before the first byte is sent, so a new process can ask
// the server what happened instead of paying twice or forgetting the payment.
//
//	go run ./examples/restart
//
// The parent runs the payments API (idemtest). A first child process pays order-42 with a
// bbolt keystore; the server holds that request (a slow bank), and the parent SIGKILLs the
// child while it waits. A second child reopens the keystore and runs Client.Recover, which
// reconciles the pending record through the status endpoint. The ledger shows one payment.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// childEnv holds a child's job (JSON). Its presence makes the process a child.
const childEnv = "IDEM_RESTART_CHILD"

const (
	intent    = "order-42"
	body      = `{"amount":4200,"currency":"EUR","customer":"cus_42","reference":"order-42"}`
	slowDelay = 2 * time.Second // how long the server holds the payment before executing it
)

func main() {
	if raw, ok := os.LookupEnv(childEnv); ok {
		if err := child(raw, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "restart:", err)
		os.Exit(1)
	}
}

// job tells a child what to do: "pay" or "recover".
type job struct {
	Mode    string `json:"mode"`
	BaseURL string `json:"base_url"`
	Store   string `json:"store"`
}

// run is the parent: it owns the server, so the ledger outlives both children.
func run(w io.Writer) error {
	arrived := make(chan struct{}, 1)
	srv := idemtest.NewServer(idemtest.Config{
		SlowDelay:  slowDelay,
		RetryAfter: 1,
		OnPayment: func(*http.Request) {
			select {
			case arrived <- struct{}{}:
			default:
			}
		},
	})
	defer srv.Close()
	srv.Script(idemtest.FaultSlow)
	dir, err := os.MkdirTemp("", "idem-restart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	j := job{BaseURL: srv.URL, Store: filepath.Join(dir, "keys.db")}

	step(w, 1, "The parent runs the payments API on %s. It will hold the next payment for %s\n"+
		"   before executing it, like a slow bank.", srv.URL, slowDelay)

	step(w, 2, "Child 1 opens the keystore %s and pays %s.", j.Store, intent)
	j.Mode = "pay"
	cmd, err := startChild(j, w)
	if err != nil {
		return err
	}
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		cmd.kill()
		_ = cmd.wait()
		return errors.New("the payment never reached the server")
	}
	// The request reached the server, so its key is on disk: idem persists it before the
	// first byte. Wait until the server holds it (the key claimed, the slow bank at work; a
	// fault counts once the request is past the claim), then kill the child right there.
	for deadline := time.Now().Add(10 * time.Second); srv.Stats().Faults[idemtest.FaultSlow] == 0; {
		if time.Now().After(deadline) {
			cmd.kill()
			_ = cmd.wait()
			return errors.New("the server never held the payment")
		}
		time.Sleep(time.Millisecond)
	}
	cmd.kill()     // SIGKILL: no deferred code, no final write
	_ = cmd.wait() // "signal: killed"; also drains the child's output before we write again
	step(w, 3, "The request reached the server, so the key was already on disk (idem persists it\n"+
		"   before the first byte). While the server held the request, child 1 was SIGKILLed.")

	step(w, 4, "What child 1 left behind:")
	if err := showRecords(w, j.Store); err != nil {
		return err
	}
	fmt.Fprintf(w, "   ledger: %s executed %d time(s) so far; the server is still working on it\n",
		intent, srv.ExecutionsByReference(intent))

	step(w, 5, "Child 2 reopens the keystore and runs Client.Recover before anything else.")
	j.Mode = "recover"
	if cmd, err = startChild(j, w); err != nil {
		return err
	}
	if err := cmd.wait(); err != nil {
		return fmt.Errorf("child 2: %w", err)
	}

	n := srv.ExecutionsByReference(intent)
	step(w, 6, "The ledger: %s executed %d time(s).", intent, n)
	if n != 1 {
		return fmt.Errorf("%s executed %d times, want exactly 1", intent, n)
	}
	return nil
}

func step(w io.Writer, n int, format string, args ...any) {
	fmt.Fprintf(w, "\n%d. %s\n", n, fmt.Sprintf(format, args...))
}

// proc is a running child whose output is being copied.
type proc struct {
	cmd    *exec.Cmd
	copied chan struct{}
}

// startChild re-runs this program as a child doing j, its output indented under ours.
func startChild(j job, w io.Writer) (*proc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(j)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, copied: make(chan struct{})}
	go func() {
		defer close(p.copied)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			fmt.Fprintf(w, "   | %s\n", sc.Text())
		}
	}()
	return p, nil
}

// kill sends SIGKILL: the child gets no chance to run deferred code or write anything more.
func (p *proc) kill() { _ = p.cmd.Process.Kill() }

// wait waits for the child's output to be copied, then for its exit.
func (p *proc) wait() error {
	<-p.copied
	return p.cmd.Wait()
}

// showRecords prints the keystore as the killed child left it. The parent opens it only
// while no child runs: the file lock belongs to one process at a time.
func showRecords(w io.Writer, path string) error {
	store, err := boltstore.Open(path, nil)
	if err != nil {
		return err
	}
	defer store.Close()
	recs, err := store.List(context.Background())
	if err != nil {
		return err
	}
	for _, r := range recs {
		fmt.Fprintf(w, "   keystore: intent %s, key %s, state %s, request %s %s %s\n",
			r.Intent, r.Key, r.State, r.Request.Method, r.Request.URL, r.Request.Body)
		if _, auth := r.Request.Header["Authorization"]; !auth && r.State == keystore.StatePending {
			fmt.Fprintln(w, "   (no Authorization header on disk: credentials are never persisted)")
		}
	}
	return nil
}
