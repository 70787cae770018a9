package pgstore

import (
	"context"
	"strings"
)

// Parking keeps ClaimExpired from walking past live leases (schema version 2).
//
// ClaimExpired takes the oldest pending rows whose lease is not live, in CreatedAt order, so
// it walks an index by created_ns and filters out the rows whose lease is live: with 100,000
// live-leased rows older than the oldest orphan, every claim fetched and dropped all 100,000.
// No index can leave the live rows out by itself (they become orphans when their time comes,
// without any write), so a row is taken out of the walk by a write: parked_until_ns, a lease
// expiry. idem_records_unparked, the index claims walk, holds only the pending rows without
// it; idem_records_parked finds the parked rows by that time.
//
//   - ClaimExpired parks the rows it claims until their new lease lapses, in the claim's own
//     write: rows a recovery is working on never stand in the next claim's way.
//   - It parks the live rows it walked past (leased by Create, Claim, or a release before
//     version 2) until their lease's expiry, but for the newest parkKeep of them: a handful of
//     calls in flight are never written, and a claim walks past at most that many.
//   - Before claiming it puts back the parked rows whose time has passed: a row still live
//     then (renewed meanwhile, or claimed again by a release before version 2) is parked
//     again until its lease's expiry, any other goes back among the candidates, so the
//     oldest orphans come out first as before.
//   - Release clears the column, so a released record is an orphan at once. Claim and Renew
//     clear it when the new lease ends before the parked time (a pending call's short hold),
//     so the record is an orphan when that lease lapses; otherwise they leave it, and a Renew
//     stays a write that changes no indexed column. Update leaves it.
//
// The orphans of a dead instance, the common case after an outage, are claimed with no
// extra write unless they were themselves claimed by a ClaimExpired (a recovery that died
// too): those are put back first, one write each. Parking and putting back skip rows locked
// by anyone (SKIP LOCKED), touch at most parkBatch rows a statement and, for parking, one
// instance at a time: they never wait for an owner, and an owner's Renew waits at most for
// one such statement.

// parkKeep is how many live rows below a claim's last orphan (or, when it found fewer than it
// asked for, anywhere) stay unparked: the most a claim walks past after parking.
var parkKeep = 256

// parkBatch is the most rows one park or unpark statement touches.
var parkBatch = 1024

// unpark puts back the parked rows whose parked_until_ns is not after now, parkBatch at a
// time, until none is left: a row whose lease is live at now is parked again until its lease
// expiry, any other is unparked.
func (s *Store) unpark(ctx context.Context, now int64) error {
	for {
		tag, err := s.pool.Exec(ctx, `UPDATE idem_records r
			SET parked_until_ns = CASE WHEN r.owner IS NOT NULL AND r.lease_until_ns > $1 THEN r.lease_until_ns END
			FROM (SELECT tenant, key FROM idem_records
				WHERE state = 'pending' AND parked_until_ns IS NOT NULL AND parked_until_ns <= $1
				ORDER BY parked_until_ns LIMIT $2
				FOR UPDATE SKIP LOCKED) p
			WHERE r.tenant = p.tenant AND r.key = p.key`, now, parkBatch)
		if err != nil {
			return dbErr(ctx, "unpark", err)
		}
		if tag.RowsAffected() < int64(parkBatch) {
			return nil
		}
	}
}

// park parks the unparked pending rows whose lease is live at now that lie before the
// position (created, key, tenant) in claim order (anywhere when bounded is false), but for the
// newest parkKeep of them; parkBatch at a time, until fewer are left. One instance parks at a
// time (an advisory lock, tried, not waited for): parkers racing over the same rows would
// only skip each other's.
func (s *Store) park(ctx context.Context, now int64, bounded bool, created int64, key, tenant []byte) error {
	// Two statements rather than one with "NOT bounded OR (...) < (...)": the OR would keep
	// the row comparison out of the index condition.
	below, args := ``, []any{now, parkKeep, parkBatch, parkLock}
	if bounded {
		below, args = `AND (created_ns, key, tenant) < ($5, $6, $7)`, append(args, created, key, tenant)
	}
	const live = `state = 'pending' AND parked_until_ns IS NULL AND owner IS NOT NULL AND lease_until_ns > $1`
	// The candidates come from the index walk; each is then locked by its primary key,
	// skipped if locked, and checked again.
	sql := `UPDATE idem_records r SET parked_until_ns = r.lease_until_ns
		FROM (SELECT tenant, key FROM idem_records
			WHERE ` + live + ` ` + below + ` AND pg_try_advisory_xact_lock($4)
			ORDER BY created_ns DESC, key DESC, tenant DESC OFFSET $2 LIMIT $3) c,
		LATERAL (SELECT 1 FROM idem_records x WHERE x.tenant = c.tenant AND x.key = c.key AND x.` +
		strings.ReplaceAll(live, " AND ", " AND x.") + ` FOR UPDATE SKIP LOCKED) l
		WHERE r.tenant = c.tenant AND r.key = c.key`
	for {
		tag, err := s.pool.Exec(ctx, sql, args...)
		if err != nil {
			return dbErr(ctx, "park", err)
		}
		if tag.RowsAffected() < int64(parkBatch) {
			return nil
		}
	}
}

// parkLock is the pg_try_advisory_xact_lock key a park statement holds: "idpk".
const parkLock = 0x6964706b
