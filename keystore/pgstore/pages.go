package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/idemkit/idem/keystore"
)

var _ keystore.Pager = (*Store)(nil)

// ListPage returns up to limit records (keystore.DefaultPageSize if limit <= 0) in any of
// states (every state if none) after the cursor after, in List's order (CreatedAt, then
// Key, then Scope), and the cursor of the next page ("" when this one is the last). A row
// that does not decode (ErrCorrupt) is skipped, left as it is and reported in
// Page.Damaged, so that one damaged row never stops a Recover. It returns an error wrapping
// keystore.ErrInvalid for a cursor it did not make, keystore.ErrClosed, ctx.Err(), or the
// database's error.
func (s *Store) ListPage(ctx context.Context, states []keystore.State, after keystore.Cursor, limit int) (keystore.Page, error) {
	if err := s.begin(ctx); err != nil {
		return keystore.Page{}, err
	}
	if limit <= 0 {
		limit = keystore.DefaultPageSize
	}
	created, key, tenant, err := parseCursor(after)
	if err != nil {
		return keystore.Page{}, err
	}
	names := make([]string, len(states))
	for i, st := range states {
		names[i] = string(st)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+columns+` FROM idem_records
		WHERE (cardinality($1::text[]) = 0 OR state = ANY($1))
		  AND ($2::boolean OR (created_ns, key, tenant) > ($3, $4, $5))
		ORDER BY created_ns, key, tenant LIMIT $6`,
		names, after == "", created, key, tenant, limit)
	if err != nil {
		return keystore.Page{}, dbErr(ctx, "list page", err)
	}
	defer rows.Close()
	var p keystore.Page
	var r row
	n := 0
	for rows.Next() {
		r = row{}
		if err := r.scan(rows); err != nil {
			return keystore.Page{}, dbErr(ctx, "scan", err)
		}
		n++
		rec, err := r.record()
		if errors.Is(err, ErrCorrupt) {
			p.Damaged = append(p.Damaged, keystore.DamagedRecord{Scope: string(r.tenant), Key: string(r.key), Err: err})
			continue
		}
		if err != nil {
			return keystore.Page{}, err
		}
		p.Records = append(p.Records, rec)
	}
	if err := rows.Err(); err != nil {
		return keystore.Page{}, dbErr(ctx, "list page", err)
	}
	if n == limit { // maybe more: continue after the last row examined
		p.Next = makeCursor(r.createdNs, r.key, r.tenant)
	}
	return p, nil
}

// makeCursor encodes a row's position in List's order: created_ns, key, tenant.
func makeCursor(created int64, key, tenant []byte) keystore.Cursor {
	return keystore.Cursor(strconv.FormatInt(created, 10) + ":" + strconv.Itoa(len(key)) + ":" + string(key) + string(tenant))
}

// parseCursor decodes makeCursor's output; "" is the start.
func parseCursor(c keystore.Cursor) (created int64, key, tenant []byte, err error) {
	if c == "" {
		return 0, []byte{}, []byte{}, nil
	}
	bad := fmt.Errorf("%w: pgstore: cursor %q was not made by ListPage", keystore.ErrInvalid, c)
	ns, rest, ok := strings.Cut(string(c), ":")
	if !ok {
		return 0, nil, nil, bad
	}
	kl, rest, ok := strings.Cut(rest, ":")
	if !ok {
		return 0, nil, nil, bad
	}
	created, err1 := strconv.ParseInt(ns, 10, 64)
	n, err2 := strconv.Atoi(kl)
	if err1 != nil || err2 != nil || n < 0 || n > len(rest) {
		return 0, nil, nil, bad
	}
	key, tenant = []byte(rest[:n]), []byte(rest[n:])
	if makeCursor(created, key, tenant) != c { // "+1", "01": not a cursor ListPage made
		return 0, nil, nil, bad
	}
	return created, key, tenant, nil
}
