package idemadmin

import (
	"net/http"
	"time"

	"github.com/idemkit/idem/keystore"
)

// GET /stats: the keystore's records by state and age, beside the client's counters.

// RecordStats is the "records" member of the admin handler's GET /stats: what the
// keystore holds now. Ages are in whole seconds, measured from CreatedAt; nil (JSON null)
// when there is no record in that state, so that 0 always means a record just created.
type RecordStats struct {
	// Total is the number of records in the keystore, every state and tenant.
	Total int `json:"total"`
	// ByState counts the records of each state; every state is present, 0 when none.
	ByState map[keystore.State]int `json:"by_state"`
	// OldestPendingSeconds is the age of the oldest pending record in seconds, nil (null)
	// when no record is pending.
	OldestPendingSeconds *int64 `json:"oldest_pending_seconds"`
	// OldestManualSeconds is the age of the oldest manual record in seconds, nil (null) when
	// no record is manual.
	OldestManualSeconds *int64 `json:"oldest_manual_seconds"`
	// Tenants is the number of distinct tenants (Record.Scope) among the records.
	Tenants int `json:"tenants"`
	// Damaged is the number of stored records that cannot be decoded: skipped, left
	// untouched, not counted in Total, and listed by GET /records. Only a store that reports
	// them (keystore.Pager: boltstore, pgstore) can count them; ComputeRecordStats
	// leaves it 0.
	Damaged int `json:"damaged"`
}

// ComputeRecordStats counts recs by state and finds the oldest pending and manual ones,
// ages measured at now.
func ComputeRecordStats(recs []*keystore.Record, now time.Time) RecordStats {
	a := newRecordStats(now)
	for _, r := range recs {
		a.add(r)
	}
	return a.result()
}

// recordStats builds RecordStats one record at a time, so that GET /stats reads the
// keystore page by page instead of holding every record.
type recordStats struct {
	s       RecordStats
	tenants map[string]bool
	now     time.Time
}

func newRecordStats(now time.Time) *recordStats {
	return &recordStats{now: now, tenants: map[string]bool{}, s: RecordStats{ByState: map[keystore.State]int{
		keystore.StatePending: 0, keystore.StateSucceeded: 0, keystore.StateFailed: 0, keystore.StateManual: 0}}}
}

func (a *recordStats) add(r *keystore.Record) {
	a.s.Total++
	a.s.ByState[r.State]++
	a.tenants[r.Scope] = true
	age := int64(a.now.Sub(r.CreatedAt) / time.Second)
	switch r.State {
	case keystore.StatePending:
		a.s.OldestPendingSeconds = oldestOf(a.s.OldestPendingSeconds, age)
	case keystore.StateManual:
		a.s.OldestManualSeconds = oldestOf(a.s.OldestManualSeconds, age)
	}
}

func (a *recordStats) result() RecordStats {
	a.s.Tenants = len(a.tenants)
	return a.s
}

// oldestOf is the larger of *cur and a, a when cur is nil (no record yet).
func oldestOf(cur *int64, a int64) *int64 {
	if cur != nil && *cur >= a {
		return cur
	}
	return &a
}

// stats serves GET /stats.
func (h *adminHandler) stats(w http.ResponseWriter, r *http.Request) {
	acc := newRecordStats(h.c.Now())
	err := keystore.ListAll(r.Context(), h.c.Store(), nil, 0, func(p keystore.Page) error {
		acc.s.Damaged += len(p.Damaged)
		for _, rec := range p.Records {
			acc.add(rec)
		}
		return nil
	})
	if err != nil {
		problem(w, http.StatusInternalServerError, "listing records: "+err.Error())
		return
	}
	writeAdminJSON(w, map[string]any{"client": snakeFields(h.c.Stats()), "records": acc.result()})
}
