// Command idemctl is the operator's view of an idem keystore: it lists, shows and counts the
// records a service persisted (pending and manual ones are the stuck payments), and purges
// finished ones.
//
// Usage:
//
//	idemctl ls    -db FILE [-state pending,manual] [-min-age 10m] [-tenant T] [-json]
//	idemctl show  -db FILE [-tenant T] (KEY | -intent INTENT) [-json]
//	idemctl stats -db FILE [-json]
//	idemctl purge -db FILE -older-than 72h [-dry-run] [-json]
//
// ls, show and stats open the bbolt file read-only (boltstore.OpenReadOnly): they never write
// to it. purge opens it for writing and deletes succeeded and failed records last updated
// before the cutoff; pending and manual records are never purged. A running service holds
// the file's lock: idemctl then stops after -timeout (1s) with a message saying so, instead
// of waiting; stop the service, or use its admin endpoint. Output is a human table by
// default and JSON with -json. Records hold no credentials (idem never persists them), but
// show prints request and response bodies.
//
// Exit status: 0 on success, 1 on an error (a locked or damaged file, an unknown key), 2 on
// a usage error or a command that is not available yet (resolve, recover, -url, -dsn).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, time.Now))
}

// usage is printed for -h and for a usage error.
const usage = `idemctl: the operator's view of an idem keystore (bbolt file)

commands:
  ls     list records (read-only): -state pending,manual -min-age 10m -tenant T
  show   one record by key or -intent, bodies included (read-only)
  stats  records by state, oldest pending and manual (read-only)
  purge  delete succeeded and failed records older than -older-than (writes)

common flags: -db FILE (required), -json, -timeout 1s (longest wait for the file lock)
not yet: resolve, recover, -url (admin endpoint), -dsn (Postgres)

run "idemctl COMMAND -h" for a command's flags
`

// run executes one command and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, now func() time.Time) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "ls":
		err = cmdLs(ctx, rest, stdout, stderr, now)
	case "show":
		err = cmdShow(ctx, rest, stdout, stderr)
	case "stats":
		err = cmdStats(ctx, rest, stdout, stderr, now)
	case "purge":
		err = cmdPurge(ctx, rest, stdout, stderr, now)
	case "resolve", "recover":
		err = usageError{fmt.Sprintf("%s is not available yet: it needs the service's admin endpoint (coming with idem's admin handler); the keystore file is locked while the service runs", cmd)}
	default:
		err = usageError{fmt.Sprintf("unknown command %q", cmd)}
	}
	if err == nil {
		return 0
	}
	if err == errHelp {
		return 0
	}
	fmt.Fprintln(stderr, "idemctl:", err)
	if _, ok := err.(usageError); ok {
		return 2
	}
	return 1
}

// usageError is a mistake in the command line (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }
