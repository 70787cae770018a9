// Package boltstore is the file keystore: a keystore.Store in one bbolt file
// (go.etcd.io/bbolt), durable when a write returns (committed and fsynced), with a file lock
// so that one process at a time uses it.
//
// Credentials never reach the file: keystore.CredentialHeaders, Options.SecretHeaders and,
// in responses, keystore.ResponseSecretHeaders are stripped before a record is encoded.
//
// Concurrent writes share one commit (group commit, no timer): a lone writer pays exactly one
// bbolt transaction, and writers that arrive while a commit is running are written together
// in the next one, so 64 concurrent callers get several times the serial rate. A deferred
// write (UpdateDeferred, a call's final state) waits for no sync: it rides the next commit,
// or a flush within Options.FlushDelay, or Close.
//
// A damaged file (cut short, pages overwritten) yields ErrCorrupt, from Open or from the calls
// that touch the damage, rather than a crash; see ErrCorrupt. bbolt checksums only its meta
// pages, so every record and intent index entry carries a CRC-32C of its key and value, and
// every intent is indexed twice (by name and by hash): a changed byte in a record or an index
// entry, key or value, is ErrCorrupt on the read that meets it, never a miss that would mint
// a new key for an intent already paid (checksum.go). Store.Verify checks the whole file,
// Store.Quarantine sets a damaged record aside on an operator's verdict, and
// Store.RebuildIntentIndex rebuilds the index (idemctl verify, quarantine, rebuild-index).
// Damage that the checks cannot see remains: a lowered element count in a page hides whole
// records from List and Recover. Keep the file where the storage checks what it reads (a
// filesystem with data checksums, such as ZFS or btrfs) where that matters, or use pgstore.
//
// File layout (schema version 3, see docs/KEYSTORE.md): bucket "meta" holds the schema
// version; bucket "records" maps uvarint(len(scope)) || scope || key to a CRC-32C checksum,
// a flags byte and the keystore.Record in a binary encoding (or in JSON, as version 2 wrote
// it); bucket "intents" maps uvarint(len(scope))
// || scope || intent to a checksum and the key, and bucket "intenthash" holds the same index
// under a hash of the intent (checksum.go); buckets "unleased" and "leased" index the pending
// records for ClaimExpired (index.go); bucket "quarantine", once made, keeps the damaged
// records an operator set aside (Quarantine).
//
// A file deleted or replaced while open is noticed at the next commit: every call then fails
// with keystore.ErrFileGone (and Options.OnFileGone is called). A lock file beside the
// keystore (path + ".lock") keeps a second process off the path while the first lives, even
// when the first one's file was deleted.
package boltstore

import (
	"os"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
)

const (
	// SchemaVersion is the layout version this code writes and reads. Version 3 writes
	// records in a binary encoding (binary.go) where version 2 wrote JSON: Open reads a
	// version 2 file and raises its version to 3 in place (its JSON records are read as
	// they are and rewritten in binary at their next write), so that releases that read only
	// version 2 refuse it. Open refuses any other version (ErrSchemaVersion), never misreading
	// it: version 1 (before checksums and the pending index) is refused as clearly as a newer
	// one.
	SchemaVersion = 3

	// DefaultTimeout is how long Open waits for the file lock when Options.Timeout is not set.
	DefaultTimeout = time.Second

	// DefaultMode is the permission of a file created by Open when Options.Mode is not set:
	// owner read and write only.
	DefaultMode os.FileMode = 0o600
)

// Options configure Open. A nil *Options, like the zero value, means every default.
type Options struct {
	// Timeout is the longest Open waits for the file lock that another process or Store
	// holds before it returns ErrLocked (bbolt polls the lock every 50ms, so it may give up
	// up to 50ms sooner). Zero or negative means DefaultTimeout (1s): Open never waits
	// forever.
	Timeout time.Duration

	// Mode is the permission bits of a file that Open creates (the process umask applies).
	// An existing file keeps its mode. Zero means DefaultMode (0600).
	Mode os.FileMode

	// SecretHeaders names extra headers (case-insensitive) that are never written to the
	// file, in addition to keystore.CredentialHeaders; for example an API-key header such as
	// "X-Api-Key". They are stripped from requests and responses.
	SecretHeaders []string

	// FlushDelay bounds how long a deferred write (UpdateDeferred) waits to be committed when
	// no other write comes to carry it: a flush commits it at most FlushDelay after it was
	// queued. Zero or negative means DefaultFlushDelay (50 ms).
	FlushDelay time.Duration

	// SyncFreelist writes bbolt's freelist at every commit, as bbolt does by default. The
	// default (false) does not: Open rebuilds the freelist from the page tree (after checking
	// that tree), and the freelist is a map. A written freelist holds every free page, so after
	// a large purge every later commit rewrites it in full (BenchmarkFreelist: a lone write
	// 5-10x slower after 200k records were purged, against none without). The cost of the
	// default: Open scans the file, and a commit that fails rescans it on a bbolt goroutine,
	// which a file truncated by another program while the store is open makes fault (the
	// process then dies instead of getting ErrCorrupt). Freed pages are reused either way.
	SyncFreelist bool

	// OnFileGone, if set, is called once (on a goroutine of its own) when the store finds
	// that its file was deleted or replaced while open; its argument wraps
	// keystore.ErrFileGone. From then on every call of the Store fails with that error (see
	// keystore.ErrFileGone): alert, and restart the process once the file is restored.
	OnFileGone func(error)

	// KeyRing, if set, seals the request and response bodies of every record written from
	// now on with AES-GCM (keystore.KeyRing), and opens sealed bodies on read. Without it,
	// bodies are written in plaintext, and a record with sealed bodies fails to read with an
	// error wrapping keystore.ErrKeyUnknown. Records written without a ring stay readable
	// with one. See docs/KEYSTORE.md for what stays in plaintext.
	KeyRing *keystore.KeyRing
}

func (o *Options) withDefaults() Options {
	var out Options
	if o != nil {
		out = *o
		out.SecretHeaders = append([]string(nil), o.SecretHeaders...)
	}
	if out.Timeout <= 0 {
		out.Timeout = DefaultTimeout
	}
	if out.FlushDelay <= 0 {
		out.FlushDelay = DefaultFlushDelay
	}
	if out.Mode == 0 {
		out.Mode = DefaultMode
	}
	return out
}

// Store is a keystore.Store in a bbolt file. It is safe for concurrent use. Open it with Open
// and release the file with Close.
type Store struct {
	db     *bbolt.DB
	secret []string
	lock   *os.File // the lock file beside the keystore (lockBeside), nil if read-only
	closed atomic.Bool
	commit committer
	// pending holds the deferred writes not committed yet (see deferred.go).
	pending overlay
	// codec makes and reads the records' values (checksums, sealed bodies).
	codec codec
	// summaries spares an update the decode of a pending record this store wrote.
	summaries summaryCache
}

var _ keystore.Store = (*Store)(nil)

// Close waits for the writes already queued to commit, then closes the file and releases its
// lock. Every later call, Close included, returns keystore.ErrClosed.
func (s *Store) Close() error {
	if !s.commit.close() {
		return keystore.ErrClosed
	}
	s.closed.Store(true)
	err := s.db.Close()
	if s.lock != nil {
		_ = s.lock.Close() // releases the lock; the file stays for the next opener
	}
	return err
}
