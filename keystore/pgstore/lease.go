package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/idemkit/idem/keystore"
)

// The fleet methods. Each is one statement whose WHERE clause holds the rule, so that when
// instances race, PostgreSQL's row lock orders them and the loser's statement, re-evaluated on
// the winner's row, matches nothing. A refusal is then explained by reading the row.

// Claim gives l.Owner the lease of the pending record (scope, key) until l.Until, with the
// next fencing token, and returns the claimed record. Errors: keystore.ErrInvalid (bad lease),
// keystore.ErrNotFound, keystore.ErrNotPending (wrapped), *keystore.ClaimedError (another
// owner holds a lease live at l.Now), keystore.ErrClosed, or the database's error.
func (s *Store) Claim(ctx context.Context, scope, key string, l keystore.Lease) (*keystore.Record, error) {
	return s.claimOne(ctx, scope, key, l, keystore.StatePending, keystore.ClaimRefusal)
}

// claimOne gives l.Owner the lease of the record (scope, key) in state, with the next fencing
// token, in one statement; when it claims nothing, a second reads the record only for
// refusal to say why (keystore.ClaimRefusal, keystore.ManualClaimRefusal).
func (s *Store) claimOne(ctx context.Context, scope, key string, l keystore.Lease, state keystore.State,
	refusal func(*keystore.Record, keystore.Lease) error) (*keystore.Record, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	now, until, err := leaseNanos(l)
	if err != nil {
		return nil, err
	}
	// A lease that ends before the row's parked time unparks it (parkedUnless), or ClaimExpired
	// would pass over it until the old expiry.
	rec, err := s.getOne(ctx, `UPDATE idem_records SET owner = $3, lease_until_ns = $5, fence = fence + 1, `+parkedUnless+`
		WHERE tenant = $1 AND key = $2 AND state = $6
		AND (owner IS NULL OR lease_until_ns IS NULL OR lease_until_ns <= $4 OR owner = $3)
		RETURNING `+columns, []byte(scope), []byte(key), l.Owner, now, until, string(state))
	if !errors.Is(err, keystore.ErrNotFound) {
		return rec, err
	}
	cur, err := s.getOne(ctx, `SELECT `+columns+` FROM idem_records WHERE tenant = $1 AND key = $2`, []byte(scope), []byte(key))
	if err != nil {
		return nil, err
	}
	if err := refusal(cur, l); err != nil {
		return nil, err
	}
	// Claimable now: the holder released it between the two statements. Report the lease we
	// saw lost to; the caller waits and tries again, as for any ClaimedError.
	return nil, &keystore.ClaimedError{Scope: scope, Key: key, Owner: cur.Owner, Until: cur.LeaseUntil, Fence: cur.Fence}
}

// parkedUnless keeps a row's parked time unless the new lease ($5) ends before it: a lease
// shortened by Renew (a pending call's hold) or by its holder's own Claim must make the row
// claimable when it lapses, not at the old expiry. Unchanged, the column keeps the update HOT.
const parkedUnless = `parked_until_ns = CASE WHEN parked_until_ns > $5 THEN NULL ELSE parked_until_ns END`

func leaseNanos(l keystore.Lease) (now, until int64, err error) {
	if now, err = nanos("lease now", l.Now); err != nil {
		return 0, 0, err
	}
	if until, err = nanos("lease until", l.Until); err != nil {
		return 0, 0, err
	}
	return now, until, nil
}

// Renew sets the lease expiry of (scope, key) to until if (owner, fence) holds its lease.
// Errors: keystore.ErrInvalid (empty owner, zero until), keystore.ErrNotFound,
// *keystore.FencedError, keystore.ErrClosed, or the database's error.
func (s *Store) Renew(ctx context.Context, scope, key, owner string, fence int64, until time.Time) error {
	if err := keystore.CheckRenew(owner, until); err != nil {
		return err
	}
	if err := s.begin(ctx); err != nil {
		return err
	}
	n, err := nanos("lease until", until)
	if err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE idem_records SET lease_until_ns = $5, `+parkedUnless+`
		WHERE tenant = $1 AND key = $2 AND owner = $3 AND fence = $4`, []byte(scope), []byte(key), owner, fence, n)
	if err != nil {
		return dbErr(ctx, "renew", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	return s.notHolder(ctx, scope, key, owner, fence)
}

// Release ends the lease of (owner, fence) on (scope, key), keeping the fencing token;
// releasing a record already released at that fence returns nil. Errors: keystore.ErrInvalid
// (empty owner), keystore.ErrNotFound, *keystore.FencedError, keystore.ErrClosed, or the
// database's error.
func (s *Store) Release(ctx context.Context, scope, key, owner string, fence int64) error {
	if owner == "" {
		return errors.Join(keystore.ErrInvalid, errors.New("release without an owner"))
	}
	if err := s.begin(ctx); err != nil {
		return err
	}
	// A released record is an orphan at once: it leaves the parked rows too (park.go).
	tag, err := s.pool.Exec(ctx, `UPDATE idem_records SET owner = NULL, lease_until_ns = NULL, parked_until_ns = NULL
		WHERE tenant = $1 AND key = $2 AND fence = $4 AND (owner = $3 OR owner IS NULL)`,
		[]byte(scope), []byte(key), owner, fence)
	if err != nil {
		return dbErr(ctx, "release", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	return s.notHolder(ctx, scope, key, owner, fence)
}

// notHolder explains why a statement for the holder (owner, fence) matched nothing:
// keystore.ErrNotFound or a *keystore.FencedError. A fence that moved on never comes back.
func (s *Store) notHolder(ctx context.Context, scope, key, owner string, fence int64) error {
	cur, err := s.getOne(ctx, `SELECT `+columns+` FROM idem_records WHERE tenant = $1 AND key = $2`, []byte(scope), []byte(key))
	if err != nil {
		return err
	}
	if err := keystore.CheckHolder(cur, owner, fence); err != nil {
		return err
	}
	return &keystore.FencedError{Scope: scope, Key: key, Fence: fence, Current: cur.Fence, Owner: cur.Owner}
}

// ClaimExpired claims for l.Owner up to limit pending records that hold no lease live at
// l.Now, oldest CreatedAt first, and returns them. The orphans are selected FOR UPDATE SKIP
// LOCKED and claimed by the same statement: a row another reclaimer is claiming is skipped,
// not waited for, and never handed out twice. It may return fewer than limit while others
// reclaim too. The rows it claims, and the rows whose live lease it walked past, are parked so
// that later claims skip them until that lease's expiry (park.go); parked rows whose time has
// passed are put back first.
// Rows that do not decode are skipped (ListPage reports them). Errors: keystore.ErrInvalid
// (bad lease, limit < 1), keystore.ErrClosed, or the database's error.
func (s *Store) ClaimExpired(ctx context.Context, l keystore.Lease, limit int) ([]*keystore.Record, error) {
	if err := keystore.CheckClaimExpired(l, limit); err != nil {
		return nil, err
	}
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	now, until, err := leaseNanos(l)
	if err != nil {
		return nil, err
	}
	// Parked rows whose time has passed go back among the candidates first, so that the
	// oldest orphans are among them; the rows claimed here are parked until l.Until, so
	// that no later claim walks past them while this owner works on them (park.go).
	if err := s.unpark(ctx, now); err != nil {
		return nil, err
	}
	// A row that does not decode is claimed with the others but not returned: its lease
	// lapses unused, and ListPage reports it. Failing on it would strand the good rows this
	// statement has already claimed, and every reclaim pass would fail the same way. Claimed,
	// it is not an orphan again before its lease lapses, so another round fills the batch
	// with the rows behind it: a batch of damaged rows alone must not end a reclaim pass.
	out := []*keystore.Record{}
	for len(out) < limit {
		recs, n, err := s.queryRows(ctx, true, `WITH orphans AS (
				SELECT tenant, key FROM idem_records
				WHERE state = 'pending' AND parked_until_ns IS NULL
				AND (owner IS NULL OR lease_until_ns IS NULL OR lease_until_ns <= $1)
				ORDER BY created_ns, key, tenant
				LIMIT $4
				FOR UPDATE SKIP LOCKED)
			UPDATE idem_records r SET owner = $2, lease_until_ns = $3, fence = r.fence + 1, parked_until_ns = $3
			FROM orphans o WHERE r.tenant = o.tenant AND r.key = o.key
			RETURNING `+qualified, now, l.Owner, until, limit-len(out))
		if err != nil {
			if len(out) > 0 { // claimed already: hand them out, the next call reports the error
				break
			}
			return nil, err
		}
		out = append(out, recs...)
		if n == len(recs) || n == 0 { // nothing skipped, or no orphan left
			break
		}
	}
	keystore.SortRecords(out)
	// Park the live rows this claim walked past: those before its newest orphan when it
	// filled the batch, else every one. A failure leaves them for the next claim to park;
	// the records claimed are handed out all the same.
	var last *keystore.Record
	if len(out) == limit {
		last = out[len(out)-1]
	}
	if err := s.parkBehind(ctx, now, last); err != nil && len(out) == 0 {
		return nil, err
	}
	return out, nil
}

// parkBehind parks the live rows before last in claim order, or anywhere if last is nil.
func (s *Store) parkBehind(ctx context.Context, now int64, last *keystore.Record) error {
	if last == nil {
		return s.park(ctx, now, false, 0, nil, nil)
	}
	created, err := nanos("CreatedAt", last.CreatedAt)
	if err != nil {
		return err
	}
	return s.park(ctx, now, true, created, []byte(last.Key), []byte(last.Scope))
}
