package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemadmin"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// storeBackend works on a keystore idemctl opened itself (bbolt or Postgres).
type storeBackend struct {
	s       keystore.Store
	now     func() time.Time
	closeFn func() // releases what the store was opened on (a connection pool)
}

func (b *storeBackend) close() error {
	err := b.s.Close()
	if b.closeFn != nil {
		b.closeFn()
	}
	return err
}

func (b *storeBackend) list(ctx context.Context, f listFilter) ([]idemadmin.Record, []damagedRow, error) {
	t := b.now()
	out := []idemadmin.Record{}
	var damaged []damagedRow
	// Page by page, so that one record that cannot be decoded is named instead of failing
	// the listing.
	err := keystore.ListAll(ctx, b.s, f.states, 0, func(p keystore.Page) error {
		for _, d := range p.Damaged {
			if f.tenant == nil || d.Scope == *f.tenant {
				damaged = append(damaged, damagedRow{Scope: d.Scope, Key: d.Key, Error: fmt.Sprint(d.Err)})
			}
		}
		for _, r := range p.Records {
			if t.Sub(r.CreatedAt) >= f.minAge && (f.tenant == nil || r.Scope == *f.tenant) {
				out = append(out, summary(r, t))
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	slices.SortStableFunc(out, func(a, b idemadmin.Record) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.Scope+"\x00"+a.Key, b.Scope+"\x00"+b.Key)
	})
	if f.limit > 0 && len(out) > f.limit {
		out = out[:f.limit]
	}
	return out, damaged, nil
}

// sameOrigin reports whether u has base's scheme, host and port (a default port spelled or
// not, the host's case aside).
func sameOrigin(u, base *url.URL) bool {
	if u == nil || base == nil || base.Host == "" {
		return false
	}
	return strings.EqualFold(u.Scheme, base.Scheme) && strings.EqualFold(u.Hostname(), base.Hostname()) &&
		portOf(u) == portOf(base)
}

func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch strings.ToLower(u.Scheme) {
	case "http":
		return "80"
	case "https":
		return "443"
	}
	return ""
}

func summary(r *keystore.Record, now time.Time) idemadmin.Record {
	return idemadmin.Record{Scope: r.Scope, Key: r.Key, Intent: r.Intent, State: r.State,
		Method: r.Request.Method, URL: r.Request.URL, Attempts: r.Attempts, LastStatusCode: r.LastStatusCode,
		Reason: r.Reason, Error: r.Error, Note: r.Note, AgeSeconds: int64(now.Sub(r.CreatedAt) / time.Second),
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

func (b *storeBackend) get(ctx context.Context, tenant, key, intent string) (*keystore.Record, error) {
	var rec *keystore.Record
	var err error
	if intent != "" {
		rec, err = b.s.GetByIntent(ctx, tenant, intent)
	} else {
		rec, err = b.s.Get(ctx, tenant, key)
	}
	if errors.Is(err, keystore.ErrNotFound) {
		return nil, fmt.Errorf("%w: no record for %s in tenant %q", errNotFound, describe(key, intent), tenant)
	}
	if err != nil {
		return nil, err
	}
	// A keystore written by something other than idem could hold credentials: never show them.
	return keystore.StoredCopy(rec), nil
}

func describe(key, intent string) string {
	if intent != "" {
		return fmt.Sprintf("intent %q", intent)
	}
	return fmt.Sprintf("key %q", key)
}

func (b *storeBackend) stats(ctx context.Context) (statsOut, error) {
	var recs []*keystore.Record
	damaged := 0
	err := keystore.ListAll(ctx, b.s, nil, 0, func(p keystore.Page) error {
		recs = append(recs, p.Records...)
		damaged += len(p.Damaged)
		return nil
	})
	if err != nil {
		return statsOut{}, err
	}
	st := idemadmin.ComputeRecordStats(recs, b.now())
	st.Damaged = damaged
	out := statsOut{Records: st}
	if f, ok := b.s.(*boltstore.Store); ok { // a changed byte in the index is a lost intent
		rep, err := f.Verify(ctx)
		if err != nil {
			return statsOut{}, err
		}
		for _, p := range rep.Problems {
			if p.Bucket == "intents" || p.Bucket == "intenthash" {
				out.IndexProblems++
			}
		}
	}
	return out, nil
}

// purge deletes (or with dryRun counts) the succeeded and failed records last updated before
// cutoff. A store that purges in steps (keystore.BatchPurger: boltstore) skips the records it
// cannot decode and leaves them untouched, as Recover's purge does: they are returned, listed
// afresh after the purge (or during the dry run), so that the operator learns of them. Purge
// of any other store (pgstore) judges rows by their columns and decodes nothing.
func (b *storeBackend) purge(ctx context.Context, cutoff time.Time, dryRun bool) (int, []damagedRow, error) {
	bp, batched := b.s.(keystore.BatchPurger)
	n := 0
	if !dryRun {
		if err := b.checkClock(ctx); err != nil {
			return 0, nil, err
		}
		if !batched {
			n, err := b.s.Purge(ctx, cutoff)
			return n, nil, err
		}
		var after keystore.Cursor
		for {
			d, next, err := bp.PurgeBatch(ctx, cutoff, after, keystore.DefaultPageSize)
			n += d
			if err != nil {
				return n, nil, err
			}
			if next == "" {
				break
			}
			after = next
		}
	}
	var damaged []damagedRow
	err := keystore.ListAll(ctx, b.s, []keystore.State{keystore.StateSucceeded, keystore.StateFailed}, 0, func(p keystore.Page) error {
		if batched {
			for _, d := range p.Damaged {
				damaged = append(damaged, damagedRow{Scope: d.Scope, Key: d.Key, Error: fmt.Sprint(d.Err)})
			}
		}
		if dryRun {
			for _, r := range p.Records {
				if r.UpdatedAt.Before(cutoff) {
					n++
				}
			}
		}
		return nil
	})
	return n, damaged, err
}

// checkClock refuses a purge whose cutoff comes from this host's clock when a shared store's
// clock (keystore.Clock: PostgreSQL) differs from it by more than idem.DefaultMaxClockSkew,
// as the client does: an operator's clock running ahead would delete the fleet's fresh
// records, and a later payment of their intents would be charged again.
func (b *storeBackend) checkClock(ctx context.Context) error {
	sc, ok := b.s.(keystore.Clock)
	if !ok {
		return nil
	}
	local := b.now()
	store, err := sc.Now(ctx)
	if err != nil {
		return err
	}
	if skew := local.Sub(store); skew > idem.DefaultMaxClockSkew || skew < -idem.DefaultMaxClockSkew {
		return &idem.ClockSkewError{Op: "retention purge", Local: local, Store: store, Skew: skew, Max: idem.DefaultMaxClockSkew}
	}
	return nil
}

// resolve settles a manual record through idem.Client.Resolve, as the admin handler does.
func (b *storeBackend) resolve(ctx context.Context, req idemadmin.ResolveRequest) (*keystore.Record, error) {
	c, err := idem.NewClient(idem.Config{Store: b.s, Now: b.now})
	if err != nil {
		return nil, err
	}
	rec, err := b.get(ctx, req.Tenant, req.Key, req.Intent)
	if err != nil {
		return nil, err
	}
	res := idem.Resolution{Note: req.Note, Verdict: idem.VerdictNotExecuted}
	if req.Verdict == idem.VerdictExecuted.String() {
		res.Verdict = idem.VerdictExecuted
	}
	if req.Response != nil {
		res.Response = &keystore.Response{StatusCode: req.Response.StatusCode, Header: req.Response.Header, Body: []byte(req.Response.Body)}
	}
	out, err := c.Resolve(ctx, rec.Scope, rec.Key, res)
	if errors.Is(err, idem.ErrNotManual) {
		// The state Resolve found, which another process may have changed since rec was
		// read: rec.State would say "manual, not manual".
		cause := err
		if oe, ok := errors.AsType[*idem.OperationError](err); ok && oe.Cause != nil {
			cause = oe.Cause
		}
		return nil, fmt.Errorf("key %q: %v; only a manual record can be resolved", rec.Key, cause)
	}
	return out, err
}

// recover runs idem.Client.Recover with the client configuration given on the command line.
func (b *storeBackend) recover(ctx context.Context, rc recoverFlags) (recoverOut, error) {
	cfg := idem.Config{Store: b.s, Now: b.now, BaseURL: rc.baseURL, KeyStatusURL: rc.statusPath,
		KeyHeader: rc.keyHeader, Retention: rc.retention}
	if rc.auth != "" {
		// A pending record may name another host by an absolute URL: the API's credential
		// goes only to -base-url's scheme, host and port, never to wherever a record points.
		auth := rc.auth
		base, _ := url.Parse(rc.baseURL) // NewClient refuses it below if it is not a URL
		cfg.Credentials = func(r *http.Request) error {
			if sameOrigin(r.URL, base) {
				r.Header.Set("Authorization", auth)
			}
			return nil
		}
	}
	if rc.lookup != "" {
		l, err := idem.LookupByReference(rc.lookup, "")
		if err != nil {
			return recoverOut{}, usageError{err.Error()}
		}
		cfg.Lookup = l
	}
	c, err := idem.NewClient(cfg)
	if err != nil {
		return recoverOut{}, usageError{err.Error()}
	}
	t := b.now()
	var entries []recoveredEntry
	done := make(chan recoveredEntry)
	collected := make(chan struct{})
	go func() {
		for e := range done {
			entries = append(entries, e)
		}
		close(collected)
	}()
	rep, err := c.Recover(ctx, func(r idem.Reconciled) {
		e := recoveredEntry{Record: summary(r.Record, t)}
		if r.Err != nil {
			e.Error = r.Err.Error()
		}
		done <- e
	})
	close(done)
	<-collected
	// Damaged records were skipped and every other one reconciled, as POST /recover answers:
	// the outcomes stand, and the skipped records are listed beside them.
	damaged := []damagedRow{}
	if de, ok := errors.AsType[*idem.DamagedRecordsError](err); ok {
		for _, d := range de.Records {
			damaged = append(damaged, damagedRow{Scope: d.Scope, Key: d.Key, Error: fmt.Sprint(d.Err)})
		}
	} else if err != nil {
		return recoverOut{}, err
	}
	if entries == nil {
		entries = []recoveredEntry{}
	}
	slices.SortFunc(entries, func(a, b recoveredEntry) int {
		return strings.Compare(a.Record.Scope+"\x00"+a.Record.Key, b.Record.Scope+"\x00"+b.Record.Key)
	})
	return recoverOut{Records: entries, Report: map[string]int{"pending": rep.Pending, "skipped": rep.Skipped,
		"succeeded": rep.Succeeded, "failed": rep.Failed, "manual": rep.Manual, "unknown": rep.Unknown,
		"purged": rep.Purged, "resolved": rep.Resolved}, Damaged: damaged}, nil
}
