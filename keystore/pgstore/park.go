package pgstore

import (
	"context"
)

// Parking keeps ClaimExpired from walking past live leases (schema version 2).
//
// ClaimExpired takes the oldest pending rows whose lease is not live, in CreatedAt order, so
// it walks an index by created_ns and filters the rows whose lease is live: with 100,000
// live-leased rows older than the oldest orphan, every claim fetched and dropped all 100,000.
// No index can leave the live rows out by itself (they become orphans when their time comes,
// without any write), so a row that a claim walked past gets a write: parked_until_ns, its
// lease expiry at that moment. idem_records_unparked, the index claims walk, holds only the
// pending rows without it; idem_records_parked finds the parked rows by that time. Each claim
// first puts back the parked rows whose time has passed: a row still live then (renewed
// meanwhile) is parked again until its new expiry, any other goes back among the candidates,
// so the oldest orphans come out first as before.
//
// Only live rows in the way are written: the orphans of a dead instance, the common case
// after an outage, are claimed with no extra write, and the newest parkKeep live rows a walk
// passes stay unparked (a handful of calls in flight are never written; a claim walks past at
// most that many, plus rows claimed by others meanwhile). Claim, Renew and Update leave the
// column as it is; Release clears it, so a released record is an orphan at once. Parking and
// unparking skip rows locked by anyone (SKIP LOCKED) and touch at most parkBatch rows a
// statement, so they never wait for an owner, and an owner's Renew waits at most for one such
// statement.

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

// park parks the unparked pending rows whose lease is live at now, held by an owner other
// than me, that lie before the position (created, key, tenant) in claim order (anywhere when
// bounded is false), but for the newest parkKeep of them; parkBatch at a time, until fewer
// are left.
func (s *Store) park(ctx context.Context, now int64, me string, bounded bool, created int64, key, tenant []byte) error {
	// Two statements rather than one with "NOT bounded OR (...) < (...)": the OR would keep
	// the row comparison out of the index condition.
	below, args := ``, []any{now, me, parkKeep, parkBatch}
	if bounded {
		below, args = `AND (created_ns, key, tenant) < ($5, $6, $7)`, append(args, created, key, tenant)
	}
	const live = `state = 'pending' AND parked_until_ns IS NULL
		AND owner IS NOT NULL AND owner <> $2 AND lease_until_ns > $1`
	sql := `UPDATE idem_records r SET parked_until_ns = r.lease_until_ns
		FROM (SELECT tenant, key FROM idem_records
			WHERE (tenant, key) IN (SELECT tenant, key FROM idem_records
				WHERE ` + live + ` ` + below + `
				ORDER BY created_ns DESC, key DESC, tenant DESC OFFSET $3 LIMIT $4)
			AND ` + live + `
			FOR UPDATE SKIP LOCKED) p
		WHERE r.tenant = p.tenant AND r.key = p.key`
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
