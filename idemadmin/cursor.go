package idemadmin

import (
	"cmp"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
)

// The place in GET /records' order that next_after names.

// listCursor is a place in GET /records' order (CreatedAt, then scope and key): next_after
// names the last record of a page, and after=that lists what follows it, so that records
// settled or added between pages shift no other record out of the listing (an offset does).
type listCursor struct {
	created    int64 // CreatedAt, Unix nanoseconds
	scope, key string
}

func cursorOf(r *Record) listCursor {
	return listCursor{created: r.CreatedAt.UnixNano(), scope: r.Scope, key: r.Key}
}

// compare orders by time, then scope, then key: compared apart, since a scope may hold any
// byte and a joined name would make ("a\x00b", "c") and ("a", "b\x00c") one place.
func (c listCursor) compare(d listCursor) int {
	if c.created != d.created {
		return cmp.Compare(c.created, d.created)
	}
	if n := strings.Compare(c.scope, d.scope); n != 0 {
		return n
	}
	return strings.Compare(c.key, d.key)
}

// String is the cursor as next_after carries it: URL-safe base64 of the time, the scope's
// length, and the scope and key.
func (c listCursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.created, 10) + "\x00" +
		strconv.Itoa(len(c.scope)) + "\x00" + c.scope + c.key))
}

func parseListCursor(s string) (listCursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return listCursor{}, err
	}
	t, rest, ok := strings.Cut(string(b), "\x00")
	l, name, ok2 := strings.Cut(rest, "\x00")
	if !ok || !ok2 {
		return listCursor{}, errors.New("not a cursor of this listing")
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return listCursor{}, err
	}
	scopeLen, err := strconv.Atoi(l)
	if err != nil || scopeLen < 0 || scopeLen > len(name) {
		return listCursor{}, errors.New("bad scope length")
	}
	return listCursor{created: n, scope: name[:scopeLen], key: name[scopeLen:]}, nil
}
