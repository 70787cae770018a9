package keystore

import (
	"context"
	"fmt"
	"time"
)

// Optional capabilities a Store may implement. The client uses each one when the store has it
// and falls back to the plain Store methods otherwise, so an adapter written against Store
// alone keeps working. Memory and the bbolt file store implement all of them but Clock;
// pgstore implements Pager, StateGuardedUpdater, ManualClaimer and Clock.

// DeferredUpdater is implemented by a store that can accept a write without waiting for it
// to be durable. The client uses it for a call's final-state write only, and not when that
// state is failed: losing the write in a crash is safe when the server stored the answer,
// because the record is then still pending as it was, and the next Do of the operation or
// Recover asks the status endpoint before anything is resent. A failure may rest on an
// answer the server never stored (a 401), so it is written with Update.
type DeferredUpdater interface {
	// UpdateDeferred is Update without the wait for durability. It validates rec at once
	// (ErrInvalid, ErrClosed, ctx.Err()) and makes the new version visible to Get,
	// GetByIntent and List before it returns. The write becomes durable with the next
	// commit of the store or a background flush within a bound the store documents (the
	// bbolt store: Options.FlushDelay, default 50 ms) and at Close. A deferred write that is
	// never committed (crash, I/O error, or an error found at commit time such as
	// ErrNotFound) is lost as a whole: the stored record stays as it was.
	UpdateDeferred(ctx context.Context, rec *Record) error
}

// StateGuardedUpdater is implemented by a store that can make a write conditional on the
// state the stored record still has, checked atomically with the write. The client settles
// a manual record through it: two verdicts given at once (two operators, or an operator and
// another instance's business lookup) must not both be reported as persisted while only the
// later stands, since one may be "executed" and the other "not executed", which pays again.
// Without it, the client re-reads the record before its write, which narrows the race
// without closing it.
type StateGuardedUpdater interface {
	// UpdateFromState is Update, done only while the stored record's State is from.
	// Otherwise it writes nothing and returns an error wrapping ErrStateChanged that names
	// the stored state. Its other errors are Update's (ErrNotFound, ErrInvalid, ErrFenced,
	// ErrClosed, ctx.Err()).
	UpdateFromState(ctx context.Context, rec *Record, from State) error
}

// StateChanged returns the error UpdateFromState returns when the stored record's state is
// stored instead of from: it wraps ErrStateChanged and names both states.
func StateChanged(stored, from State) error {
	return fmt.Errorf("%w: stored state %s, the write expected %s", ErrStateChanged, stored, from)
}

// Cursor is an opaque position in a store's record order, returned by ListPage and
// PurgeBatch. The zero value "" means the start.
type Cursor string

// DamagedRecord names a stored record that cannot be decoded. The store leaves it untouched.
type DamagedRecord struct {
	Scope string // "" if the scope itself cannot be read
	Key   string // the record's key as stored (possibly raw bytes when the key is damaged)
	Err   error  // why it cannot be decoded
}

// Page is one page of ListPage.
type Page struct {
	// Records are the decodable records of the page in the requested states, in store order.
	Records []*Record
	// Damaged are the records of the page that cannot be decoded; they are skipped, never
	// modified.
	Damaged []DamagedRecord
	// Next is the cursor of the next page, "" when the listing is complete.
	Next Cursor
}

// Pager is implemented by a store that lists records in pages, so that a caller never holds
// every record in memory, and that reports an undecodable record instead of failing the whole
// listing.
type Pager interface {
	// ListPage returns the records after cursor after in the store's order (stable while
	// records are not added or removed), in any of states (every state if states is empty),
	// examining at most limit records (limit <= 0 means 256). Records added or removed
	// during a paged listing may or may not be seen; no record present throughout is missed
	// or returned twice. It returns ErrClosed after Close, ctx.Err(), or an error that
	// prevents reading at all (for the bbolt store, structural damage of its pages).
	ListPage(ctx context.Context, states []State, after Cursor, limit int) (Page, error)
}

// BatchPurger is implemented by a store that purges in small bounded steps, so that a purge
// running beside live calls never holds their writes for long.
type BatchPurger interface {
	// PurgeBatch deletes the terminal records (succeeded, failed) last updated before cutoff
	// among the next limit records after cursor after (limit <= 0 means 256), in one write or
	// in a few smaller ones (a store whose writes share a commit keeps each short), and returns
	// how many it deleted and the cursor to continue from ("" when the pass is complete).
	// Undecodable records are skipped and left untouched. It returns ErrClosed after Close,
	// ctx.Err(), or a write's error (then that write deleted nothing; deleted counts the
	// records of the writes before it, which stay deleted).
	PurgeBatch(ctx context.Context, cutoff time.Time, after Cursor, limit int) (deleted int, next Cursor, err error)
}

// Clock is implemented by a store shared by several processes whose clock is authoritative
// for them: PostgreSQL's (pgstore, SELECT now()). Leases and retention are compared with the
// caller's clock (see Lease), so an instance whose clock is far off would take over live
// leases or purge fresh records; the client compares its clock with Now before every
// operation that acts on other instances' records on the strength of its own clock, and
// refuses beyond Config.Fleet.MaxClockSkew. A store used by one process (Memory, the bbolt file
// store) has one clock and does not implement it.
type Clock interface {
	// Now returns the store's current time. It returns ErrClosed after Close, ctx.Err(), or
	// the store's error.
	Now(ctx context.Context) (time.Time, error)
}

// DefaultPageSize is the limit ListPage and PurgeBatch use when given limit <= 0.
const DefaultPageSize = 256

// ListAll is a paged listing for any Store: ListPage when s is a Pager (fn is called once per
// page), else one page with everything List returns (an undecodable record then fails List
// itself). fn's error stops the listing and is returned.
func ListAll(ctx context.Context, s Store, states []State, limit int, fn func(Page) error) error {
	p, ok := s.(Pager)
	if !ok {
		recs, err := s.List(ctx, states...)
		if err != nil {
			return err
		}
		return fn(Page{Records: recs})
	}
	var after Cursor
	for {
		page, err := p.ListPage(ctx, states, after, limit)
		if err != nil {
			return err
		}
		if err := fn(page); err != nil {
			return err
		}
		if page.Next == "" {
			return nil
		}
		after = page.Next
	}
}
