package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/idemkit/idem/idemadmin"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// errHelp: -h was given; the flag package printed the command's flags.
var errHelp = errors.New("help")

// errNotFound: the record a command names does not exist (exit status 1, clear message).
var errNotFound = errors.New("no such record")

// backend is where the records are: a keystore (a bbolt file or a Postgres database) that
// idemctl opens itself, or a running service's admin handler.
type backend interface {
	// list returns the records ls shows, oldest first, and the ones the keystore could not
	// decode (skipped, left untouched).
	list(ctx context.Context, f listFilter) ([]idemadmin.Record, []damagedRow, error)
	// get finds the record by key, or by intent when intent is set; errNotFound if none.
	get(ctx context.Context, tenant, key, intent string) (*keystore.Record, error)
	stats(ctx context.Context) (statsOut, error)
	// purge deletes (dryRun: counts) the succeeded and failed records last updated before
	// cutoff, and returns the records it skipped because it cannot decode them.
	purge(ctx context.Context, cutoff time.Time, dryRun bool) (int, []damagedRow, error)
	resolve(ctx context.Context, req idemadmin.ResolveRequest) (*keystore.Record, error)
	recover(ctx context.Context, rc recoverFlags) (recoverOut, error)
	close() error
}

// damagedRow is a stored record that cannot be decoded, as the admin handler lists it.
type damagedRow struct {
	Scope string `json:"tenant"` // Record.Scope; "tenant", as the -tenant flag
	Key   string `json:"key"`
	Error string `json:"error"`
}

// listFilter selects the records of ls.
type listFilter struct {
	states []keystore.State
	minAge time.Duration
	tenant *string // nil: every tenant
	limit  int     // the oldest limit records; 0: every one
}

// statsOut is what stats prints: the keystore's records, and (from an admin URL only) the
// running client's counters, keyed like the admin handler's JSON.
type statsOut struct {
	Records idemadmin.RecordStats `json:"records"`
	// IndexProblems counts the damaged intent index entries of a keystore file (-db):
	// entries that do not check, that one index holds and the other not, or that name a
	// record that is not theirs. idemctl verify names them.
	IndexProblems int              `json:"index_problems,omitempty"`
	Client        map[string]int64 `json:"client,omitempty"`
}

// recoverOut is what recover prints, the admin handler's POST /recover answer: Damaged lists
// the records the run could not decode, skipped and left untouched.
type recoverOut struct {
	Report  map[string]int   `json:"report"`
	Records []recoveredEntry `json:"records"`
	Damaged []damagedRow     `json:"damaged"`
}

type recoveredEntry struct {
	Record idemadmin.Record `json:"record"`
	Error  string           `json:"error,omitempty"`
}

// common holds the flags every command takes.
type common struct {
	db, dsn, url string
	json         bool
	timeout      time.Duration
	timeoutSet   bool // -timeout was given (-url has its own default)
	tokenEnv     string
	tokenHeader  string
	keyRingEnv   string
}

func newFlags(name string, stderr io.Writer, c *common) *flag.FlagSet {
	fs := flag.NewFlagSet("idemctl "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.db, "db", "", "keystore file (bbolt) `path`; it must exist (idemctl never creates one)")
	fs.StringVar(&c.dsn, "dsn", "", "Postgres keystore `DSN` (keystore/pgstore), e.g. postgres://user@host/db")
	fs.StringVar(&c.url, "url", "", "a running service's admin handler `URL` (idemadmin.NewHandler)")
	fs.BoolVar(&c.json, "json", false, "print JSON instead of a table")
	fs.DurationVar(&c.timeout, "timeout", boltstore.DefaultTimeout, "longest wait for the file lock (-db), the database connection (-dsn), or the admin URL's connection and answer; with -url, 30s unless set (recover waits for its run)")
	fs.StringVar(&c.tokenEnv, "token-env", "IDEMCTL_TOKEN", "with -url: the environment variable `NAME` whose value is sent as the authorization header")
	fs.StringVar(&c.tokenHeader, "token-header", "Authorization", "with -url: the authorization header's `name`")
	fs.StringVar(&c.keyRingEnv, "keyring-env", "", "with -db: the environment variable `NAME` holding the service's body key ring, ID:BASE64KEY[,ID:BASE64KEY...], the sealing key first")
	return fs
}

// parse parses args and checks the common flags; positional arguments, which may come
// before, between or after the flags, are returned.
func parse(fs *flag.FlagSet, c *common, args []string, maxArgs int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, errHelp
			}
			return nil, flagError{err.Error()}
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	fs.Visit(func(f *flag.Flag) { c.timeoutSet = c.timeoutSet || f.Name == "timeout" })
	n := 0
	for _, s := range []string{c.db, c.dsn, c.url} {
		if s != "" {
			n++
		}
	}
	switch {
	case n != 1:
		return nil, usageError{"name the keystore with exactly one of -db FILE, -dsn DSN or -url ADMIN_URL"}
	case len(pos) > maxArgs:
		return nil, usageError{fmt.Sprintf("unexpected arguments: %s", strings.Join(pos[maxArgs:], " "))}
	case c.timeout <= 0:
		return nil, usageError{"-timeout must be positive"}
	case c.keyRingEnv != "" && c.db == "":
		return nil, usageError{"-keyring-env goes with -db only: a service's admin URL uses the service's own key ring"}
	}
	return pos, nil
}

// open returns the backend the flags name; a bbolt file is opened read-only unless write.
func open(ctx context.Context, c *common, write bool, now func() time.Time) (backend, error) {
	switch {
	case c.url != "":
		return newAdminBackend(c)
	case c.dsn != "":
		return openPG(ctx, c, now)
	}
	s, err := openBolt(c, write)
	if err != nil {
		return nil, err
	}
	return &storeBackend{s: s, now: now}, nil
}

// openBolt opens the keystore file, read-only unless write is set, with a message that says
// what to do when the service holds the file. A file that does not exist is refused, never
// created: a mistyped path would get a fresh empty keystore, and purge and recover would
// report nothing to do.
func openBolt(c *common, write bool) (*boltstore.Store, error) {
	if _, err := os.Stat(c.db); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("-db %s: no such keystore file (idemctl never creates one: check the path)", c.db)
	}
	opts := &boltstore.Options{Timeout: c.timeout}
	if c.keyRingEnv != "" {
		spec, err := secretFromEnv("-keyring-env", c.keyRingEnv)
		if err != nil {
			return nil, err
		}
		if opts.KeyRing, err = parseKeyRing(spec); err != nil {
			return nil, usageError{fmt.Sprintf("-keyring-env %s: %v", c.keyRingEnv, err)}
		}
	}
	// Read-only first, for writing commands too: boltstore.Open initializes a bbolt file
	// without buckets as a new keystore, and idemctl never turns a file into one (purge would
	// report nothing purged from a file that was never a keystore, and leave it changed).
	s, err := boltstore.OpenReadOnly(c.db, opts)
	if err == nil && write {
		if err = s.Close(); err == nil {
			s, err = boltstore.Open(c.db, opts)
		}
	}
	switch {
	case errors.Is(err, boltstore.ErrLocked):
		return nil, fmt.Errorf("%s is in use by another process (a running service holds its lock); gave up after %s: stop the service, or use its admin endpoint (-url): %w", c.db, c.timeout, err)
	case errors.Is(err, boltstore.ErrNotKeystore):
		return nil, fmt.Errorf("-db %s is not an idem keystore, left as it is (idemctl never makes a file into one: check the path): %w", c.db, err)
	case err != nil:
		return nil, err
	}
	return s, nil
}

// secretFromEnv reads a credential from the environment variable name: never from a flag's
// value, which would land in shell history and in the process list.
func secretFromEnv(flagName, name string) (string, error) {
	if name == "" {
		return "", nil
	}
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return "", usageError{fmt.Sprintf("%s %s: the environment variable %s is not set", flagName, name, name)}
	}
	return v, nil
}

func parseStates(s string) ([]keystore.State, error) {
	if s == "" {
		return nil, nil
	}
	var out []keystore.State
	for part := range strings.SplitSeq(s, ",") {
		st := keystore.State(strings.TrimSpace(part))
		if !st.Valid() {
			return nil, usageError{fmt.Sprintf("unknown state %q (pending, succeeded, failed, manual)", st)}
		}
		out = append(out, st)
	}
	return out, nil
}

// parseKeyRing reads a key ring from ID:BASE64KEY[,ID:BASE64KEY...] (standard base64 of 16,
// 24 or 32 bytes); the first key seals, every key opens. Without it idemctl reads the records
// of a keystore whose bodies are sealed (boltstore.Options.KeyRing) as unreadable.
func parseKeyRing(spec string) (*keystore.KeyRing, error) {
	keys := map[string][]byte{}
	current := ""
	for part := range strings.SplitSeq(spec, ",") {
		id, b64, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, errors.New("want ID:BASE64KEY[,ID:BASE64KEY...]")
		}
		k, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, fmt.Errorf("key %q is not base64", id)
		}
		if _, dup := keys[id]; dup {
			return nil, fmt.Errorf("key id %q given twice", id)
		}
		keys[id] = k
		if current == "" {
			current = id
		}
	}
	return keystore.NewKeyRing(current, keys)
}
