package boltstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/idemkit/idem/keystore"
)

// binReader reads a binary record; its first error sticks and every later read returns zero
// values.
type binReader struct {
	b   []byte
	err error
	// summary: skip the headers and bodies (decodeSummary reads neither).
	summary bool
}

var errShort = errors.New("truncated")

func (r *binReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.b = nil
}

func (r *binReader) byte() byte {
	if len(r.b) < 1 {
		r.fail(errShort)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *binReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(errors.New("malformed length"))
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *binReader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(errors.New("malformed number"))
		return 0
	}
	r.b = r.b[n:]
	return v
}

// int reads a varint that must fit an int (counts and status codes: encoding/json read any
// int of the platform, so the binary encoding does too).
func (r *binReader) int() int {
	v := r.varint()
	if v < math.MinInt || v > math.MaxInt {
		r.fail(fmt.Errorf("number %d out of range", v))
		return 0
	}
	return int(v)
}

// raw returns the next length-prefixed bytes, sharing r's memory.
func (r *binReader) raw() []byte {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail(errShort)
		return nil
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

func (r *binReader) str() string { return string(r.raw()) }

// bytes returns a copy of the next length-prefixed bytes, nil if there are none.
func (r *binReader) bytes() []byte {
	s := r.raw()
	if len(s) == 0 || r.summary {
		return nil
	}
	return append([]byte(nil), s...)
}

func (r *binReader) header() http.Header {
	n := r.uvarint()
	if n == 0 || r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) { // each name takes at least two bytes
		r.fail(errShort)
		return nil
	}
	var h http.Header
	if !r.summary {
		h = make(http.Header, min(n, 32)) // a hint only: n is checked against the bytes left, not trusted
	}
	for range n {
		k := r.raw()
		m := r.uvarint()
		if r.err != nil {
			return nil
		}
		if m > uint64(len(r.b))+1 {
			r.fail(errShort)
			return nil
		}
		var vs []string
		if m > 0 {
			vs = make([]string, 0, min(m-1, 8))
		}
		for range int(m) - 1 {
			vs = append(vs, r.str())
		}
		if h != nil {
			if _, dup := h[string(k)]; dup {
				r.fail(fmt.Errorf("header %q twice", k))
				return nil
			}
			h[string(k)] = vs
		}
	}
	return h
}

// time reads a time as appendTime wrote it: the same instant and zone offset. The zone is
// UTC for offset 0 and time.Local when Local has that offset at that instant, as
// encoding/json gives them back from RFC 3339 text; otherwise a fixed zone of the offset.
func (r *binReader) time() time.Time {
	s := r.raw()
	if r.err != nil {
		return time.Time{}
	}
	t := binReader{b: s}
	sec, nsec, off := t.varint(), t.uvarint(), t.varint()
	switch {
	case t.err != nil:
		r.fail(fmt.Errorf("time: %w", t.err))
	case len(t.b) != 0:
		r.fail(errors.New("time: bytes after it"))
	case nsec >= 1e9 || off <= -24*3600 || off >= 24*3600:
		r.fail(fmt.Errorf("time: nanoseconds %d or zone offset %d out of range", nsec, off))
	default:
		tm := time.Unix(sec, int64(nsec))
		if y := tm.Year(); y < 0 || y > 9999 {
			r.fail(fmt.Errorf("time: year %d outside of range [0,9999]", y))
			return time.Time{}
		}
		if off == 0 {
			return tm.UTC()
		}
		if _, lo := tm.In(time.Local).Zone(); int64(lo) == off {
			return tm.In(time.Local)
		}
		return tm.In(time.FixedZone("", int(off)))
	}
	return time.Time{}
}

// decodeBinary decodes b, a binary record after its flags byte. On an error it returns what
// it decoded up to it (for parseDamaged) and the error, which does not wrap ErrCorrupt.
func decodeBinary(b []byte, summaryOnly bool) (*keystore.Record, error) {
	r := &binReader{b: b, summary: summaryOnly}
	if v := r.byte(); r.err == nil && v != binaryVersion {
		return &keystore.Record{}, fmt.Errorf("binary record version %d, this code reads %d", v, binaryVersion)
	}
	rec := &keystore.Record{}
	rec.Scope = r.str()
	rec.Key = r.str()
	rec.Intent = r.str()
	rec.Fingerprint = r.str()
	rec.Request.Method = r.str()
	rec.Request.URL = r.str()
	rec.Request.Header = r.header()
	rec.Request.Body = r.bytes()
	if c := r.byte(); r.err == nil {
		if int(c) >= len(stateCodes) || c == 0 {
			r.fail(fmt.Errorf("unknown state code %d", c))
		} else {
			rec.State = stateCodes[c]
		}
	}
	rec.Attempts = r.int()
	rec.LastStatusCode = r.int()
	rec.Reason = r.str()
	switch c := r.byte(); {
	case r.err != nil:
	case c > 1:
		r.fail(fmt.Errorf("not-executed byte %d", c))
	default:
		rec.NotExecuted = c == 1
	}
	rec.Error = r.str()
	switch c := r.byte(); {
	case r.err != nil:
	case c > 1:
		r.fail(fmt.Errorf("response byte %d", c))
	case c == 1:
		resp := &keystore.Response{StatusCode: r.int()}
		resp.Header = r.header()
		resp.Body = r.bytes()
		if !summaryOnly {
			rec.Response = resp
		}
	}
	rec.CreatedAt = r.time()
	rec.UpdatedAt = r.time()
	rec.Owner = r.str()
	rec.LeaseUntil = r.time()
	rec.Fence = r.varint()
	rec.Note = r.str()
	if r.err == nil && len(r.b) > 0 {
		r.fail(fmt.Errorf("%d bytes after the record", len(r.b)))
	}
	if r.err != nil {
		return rec, fmt.Errorf("binary record: %w", r.err)
	}
	return rec, nil
}
