// Command idemctl is the operator's view of an idem keystore: it lists, shows and counts the
// records a service persisted (pending and manual ones are the stuck payments), settles a
// manual record, runs Recover, and purges finished records.
//
// Usage (TARGET is one of -db FILE, -dsn DSN, -url ADMIN_URL):
//
//	idemctl ls      TARGET [-state pending,manual] [-min-age 10m] [-tenant T] [-limit 100] [-json]
//	idemctl show    TARGET [-tenant T] (KEY | -intent INTENT) [-json]
//	idemctl stats   TARGET [-json]
//	idemctl resolve TARGET [-tenant T] (KEY | -intent INTENT) -verdict executed|not_executed
//	                -note "who, evidence" [-status 201 -body '{"id":"ch_1"}'] [-json]
//	idemctl recover TARGET [-base-url URL -status-path P -auth-env NAME -lookup P] [-json]
//	idemctl purge   (-db FILE | -dsn DSN) -older-than 72h [-key-ttl 24h] [-dry-run] [-json]
//	idemctl migrate -dsn DSN
//	idemctl verify  -db FILE [-json]
//	idemctl quarantine -db FILE [-tenant T] KEY -outcome executed|not-executed -note "who, evidence" [-json]
//	idemctl rebuild-index -db FILE [-json]
//
// Targets. -db opens a bbolt keystore file: read-only (boltstore.OpenReadOnly) for ls, show and
// stats, for writing for resolve, recover and purge. The file must exist: idemctl never
// creates one (a mistyped path is an error naming it, exit status 1). A running service holds the file's lock:
// idemctl then stops after -timeout (1s) with a message saying so, instead of waiting; stop
// the service, or use -url. -dsn opens a Postgres keystore (keystore/pgstore) that migrate
// created; the DSN may set search_path. A file that is not an idem keystore (a bbolt
// database without its buckets included) is refused by every command and left as it is.
// -url talks to a running service's admin handler (idemadmin.NewHandler), which answers with the service's own client: its credentials,
// status endpoint and lookup. The value of the environment variable named by -token-env
// (default IDEMCTL_TOKEN) is sent in the -token-header header (default Authorization), for
// example IDEMCTL_TOKEN="Bearer ...".
//
// ls lists the oldest -limit records (100 by default; 0 lists every one) and says on stderr
// when more match. show and resolve name a record by KEY or -intent; without -tenant they
// take the only tenant that has it, and fail naming the tenants when several do. In JSON
// the tenant is "tenant", as the flag says.
//
// resolve settles a manual record (a stored 5xx, a key past KeyTTL) through
// idem.Client.Resolve: executed makes it succeeded with the answer given (-status, -body;
// default an empty 200), not_executed makes it failed, so that the application may pay again
// under a new intent. The note is kept on the record. A record that is not manual is refused.
//
// recover runs idem.Client.Recover: pending records are reconciled (status endpoint first,
// resent with their key only when that is safe), manual ones are settled by -lookup if given,
// and succeeded/failed records older than -retention are purged. On -db and -dsn idemctl is
// the client, so it needs the service's client settings: -base-url, -status-path, -key-header,
// and credentials from the environment variable named by -auth-env (its value is sent as the
// Authorization header, only to -base-url's scheme, host and port: a record naming another
// host by an absolute URL goes there without it). Credentials are never taken from a flag's
// value, which would land in shell history and the process list, and never persisted. With
// -url the service recovers.
//
// purge deletes the succeeded and failed records last updated at least -older-than ago. On a
// file it purges in steps (keystore.BatchPurger) and skips a record it cannot decode, left
// untouched and named on stderr (-json: under "damaged"), as ls names it; the exit status
// stays 0.
//
// verify reads a keystore file whole and checks every record (its checksum, JSON and key) and
// both intent indexes against each other and the records; it exits 1 naming each damaged
// entry. quarantine sets a damaged record aside once the operator says what happened to its
// payment (-outcome): the damaged bytes are kept in the file, and a settled record takes its
// place under its intent (succeeded for executed, failed for not-executed, as resolve
// settles), so that the intent is no longer blocked; without -tenant it finds the only tenant
// that has the key, as show and resolve do. rebuild-index rebuilds the intent index
// from the records; it refuses while a record is damaged (quarantine it first). These three
// work on a file only (-db), opened for writing by quarantine and rebuild-index.
//
// A keystore file whose bodies are sealed (boltstore.Options.KeyRing) is read with the same
// key ring, given by -keyring-env NAME: the environment variable NAME holds
// ID:BASE64KEY[,ID:BASE64KEY...], the sealing key first (never a flag's value, which would
// land in shell history). Without it (or with another key ring), ls names its records as
// unreadable (an error naming the key id) and exits 1, and show, resolve and recover refuse
// them; verify needs no key.
//
// Output is a human table within 100 columns by default (long values clipped with "…") and
// JSON with -json (bodies base64, as []byte). Records hold no credentials (idem never persists them, and idemctl strips
// them again before printing), but show prints request and response bodies, whole.
//
// Exit status: 0 on success, 1 on an error (a locked or damaged file, an unknown key, a
// record that is not manual, a refused admin request), 2 on a usage error (a non-positive
// purge -key-ttl included). ls exits 1 when it skipped records it cannot decode, after
// listing the others and naming the skipped ones on stderr. recover also exits
// 1 when it skipped records it cannot decode, or left records pending (outcome still
// unknown: run it again) or manual (a lookup or a person settles them): it prints what it
// did to every record (-json: with the skipped ones under "damaged", as POST /recover
// answers; the table prints each error whole below it) and says on stderr what is left.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, time.Now)
	stop()
	os.Exit(code)
}

// usage is printed for -h and for a usage error.
const usage = `idemctl: the operator's view of an idem keystore

commands:
  ls       list the oldest records: -state pending,manual -min-age 10m -tenant T -limit 100
  show     one record by KEY or -intent, bodies whole (as text; -json: base64)
  stats    records by state, oldest pending and manual
  resolve  settle a manual record: -verdict executed|not_executed -note "who, evidence"
  recover  run Recover now (-db/-dsn: -base-url, -status-path, -auth-env NAME); exits 1 if it
           left records pending or manual, or skipped records it cannot decode
  purge    delete succeeded and failed records older than -older-than, at least -key-ttl (24h) (-db, -dsn)
  migrate  create or upgrade the Postgres schema (-dsn)
  verify   check every record and the intent index of a file (-db); exits 1 on damage
  quarantine  set a damaged record aside: KEY -outcome executed|not-executed -note "who, evidence" (-db)
  rebuild-index  rebuild the intent index from the records (-db)
  probe    grade a SANDBOX API against idem's contract: probe URL -sandbox (creates payments)

target (exactly one): -db FILE (bbolt), -dsn DSN (Postgres), -url ADMIN_URL (a running
service's idemadmin.NewHandler; token from $IDEMCTL_TOKEN, see -token-env)
common flags: -json, -timeout 1s (longest wait for the file lock or the database; with -url
for the connection and each answer, 30s by default, but recover's)

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
	if cmd == "probe" { // its own exit codes: 1 means a contract row is broken
		return runProbe(rest, stdout, stderr)
	}
	var err error
	switch cmd {
	case "ls":
		err = cmdLs(ctx, rest, stdout, stderr, now)
	case "show":
		err = cmdShow(ctx, rest, stdout, stderr, now)
	case "stats":
		err = cmdStats(ctx, rest, stdout, stderr, now)
	case "purge":
		err = cmdPurge(ctx, rest, stdout, stderr, now)
	case "resolve":
		err = cmdResolve(ctx, rest, stdout, stderr, now)
	case "recover":
		err = cmdRecover(ctx, rest, stdout, stderr, now)
	case "migrate":
		err = cmdMigrate(ctx, rest, stdout, stderr)
	case "verify":
		err = cmdVerify(ctx, rest, stdout, stderr)
	case "quarantine":
		err = cmdQuarantine(ctx, rest, stdout, stderr, now)
	case "rebuild-index":
		err = cmdRebuildIndex(ctx, rest, stdout, stderr)
	default:
		err = usageError{fmt.Sprintf("unknown command %q", cmd)}
	}
	if err == nil {
		return 0
	}
	if err == errHelp {
		return 0
	}
	if _, ok := err.(flagError); ok { // package flag wrote it, with the usage, already
		return 2
	}
	fmt.Fprintln(stderr, "idemctl:", err)
	if _, ok := err.(usageError); ok {
		return 2
	}
	return 1
}

// flagError is a flag package flag could not parse (exit status 2): it has written the error
// and the usage to stderr.
type flagError struct{ msg string }

func (e flagError) Error() string { return e.msg }

// usageError is a mistake in the command line (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }
