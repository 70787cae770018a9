package boltstore

import (
	"errors"
	"fmt"
	"runtime/debug"

	"go.etcd.io/bbolt"
)

// guard runs fn, a call into bbolt, and turns a panic in it into an error wrapping ErrCorrupt
// (and the panic value, if it is an error). bbolt reads the file through a memory map and
// trusts what it finds there: a damaged page makes it panic (a failed assertion, an index out
// of range), and a page pointer past the end of the file or of the map makes the read fault
// (SIGBUS, SIGSEGV), which would kill the process. For the duration of fn, the calling
// goroutine's debug.SetPanicOnFault is on, so that such a fault becomes a panic that guard
// recovers; the previous setting is restored afterwards. bbolt works on the calling goroutine,
// except when Open rebuilds a freelist that the file does not store (the default, see
// Options.SyncFreelist): its walk of the page tree runs on a goroutine of bbolt's, which
// reports damage to the caller, where it panics; Open inspects the tree first (precheck.go)
// so that the walk does not meet a page outside the file. what says what was being done,
// for the message.
//
// bbolt's View rolls its transaction back in a deferred call, which reads nothing from the
// map, so a recovered panic leaves no lock behind. Use update for write transactions.
func guard(what string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		if f, ok := p.(interface { // a memory fault (runtime.Error)
			error
			Addr() uintptr
		}); ok {
			err = fmt.Errorf("%w: %s: memory fault reading the file at %#x (truncated or damaged): %w", ErrCorrupt, what, f.Addr(), f)
		} else if e, ok := p.(error); ok {
			err = fmt.Errorf("%w: %s: %w", ErrCorrupt, what, e)
		} else {
			err = fmt.Errorf("%w: %s: %v", ErrCorrupt, what, p)
		}
		err = structural(err)
	}()
	return fn()
}

// skipDamaged returns nil for err, a record's decoding error, unless it is structural damage
// of the file's pages: a scan that skips undecodable records goes on past it.
func skipDamaged(err error) error {
	if _, ok := errors.AsType[*structuralError](err); ok {
		return err
	}
	return nil
}

// structuralError marks an ErrCorrupt error that comes from the file's pages themselves (a
// panic or memory fault in bbolt, keys out of order or longer than bbolt allows, a key that
// does not parse), not from the contents of a record. After one, the tree that bbolt sees
// cannot be trusted, and a write could spread the damage: the Store refuses writes.
type structuralError struct{ err error }

func (e *structuralError) Error() string { return e.err.Error() }
func (e *structuralError) Unwrap() error { return e.err }

// structural marks err, an error wrapping ErrCorrupt, as structural damage.
func structural(err error) error {
	if _, ok := errors.AsType[*structuralError](err); ok {
		return err
	}
	return &structuralError{err}
}

// update runs fn in a bbolt write transaction under guard. A panic in fn is recovered inside
// the transaction and returned by fn, so that bbolt rolls back without reading the file. A
// panic in the commit itself makes bbolt roll back in a deferred call that rereads the
// freelist page from the map; if that panics too, the transaction stays open, holding bbolt's
// write lock, and every later write or Close would wait for it forever: update then rolls it
// back again without rereading.
func update(db *bbolt.DB, what string, fn func(tx *bbolt.Tx) error) error {
	var wtx *bbolt.Tx
	err := guard(what, func() error {
		return db.Update(func(tx *bbolt.Tx) error {
			wtx = tx
			return guard(what, func() error { return fn(tx) })
		})
	})
	if wtx != nil && wtx.DB() != nil { // a rollback that did not complete
		_ = guard(what, wtx.Rollback)
	}
	return err
}

// view runs fn in a read-only transaction under guard.
func (s *Store) view(fn func(tx *bbolt.Tx) error) error {
	return guard("reading the keystore", func() error { return s.db.View(fn) })
}
