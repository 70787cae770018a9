package pgserver_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// wireCount counts, on the connections of a pool, what the client sends PostgreSQL: the
// statements it asks to run (each extended-protocol Execute, and each statement of a
// simple-protocol Query) and the round trips (each Sync, which ends a pipeline and waits for
// the server, and each simple Query). Counted on the wire, it sees every statement: pgx's,
// pgconn's raw ones and the handler's alike. Prepares (Parse, Describe) are not statements.
type wireCount struct {
	statements atomic.Int64
	roundTrips atomic.Int64
}

// snapshot returns both counts.
func (w *wireCount) snapshot() (statements, roundTrips int64) {
	return w.statements.Load(), w.roundTrips.Load()
}

// countWire makes cfg's connections count into w.
func countWire(cfg *pgxpool.Config, w *wireCount) {
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, w: w}, nil
	}
}

// countingConn parses the frontend messages written to it: after the startup message (no
// type byte), each message is a type byte and a big-endian length that counts itself.
type countingConn struct {
	net.Conn
	w       *wireCount
	mu      sync.Mutex
	started bool
	buf     []byte
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.buf = append(c.buf, p...)
	for {
		if !c.started {
			if len(c.buf) < 4 {
				break
			}
			n := int(binary.BigEndian.Uint32(c.buf))
			if len(c.buf) < n {
				break
			}
			c.buf, c.started = c.buf[n:], true
			continue
		}
		if len(c.buf) < 5 {
			break
		}
		n := 1 + int(binary.BigEndian.Uint32(c.buf[1:]))
		if len(c.buf) < n {
			break
		}
		switch c.buf[0] {
		case 'E':
			c.w.statements.Add(1)
		case 'S':
			c.w.roundTrips.Add(1)
		case 'Q':
			c.w.roundTrips.Add(1)
			c.w.statements.Add(int64(simpleStatements(c.buf[5 : n-1])))
		}
		c.buf = c.buf[n:]
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// simpleStatements counts the statements of a simple-protocol query: its ';'-separated parts
// that are not blank or one comment line (pgxpool's ping of an idle connection is "-- ping").
// Good enough for the SQL this package and the tests send (no ';' inside literals).
func simpleStatements(sql []byte) int {
	n := 0
	for part := range bytes.SplitSeq(sql, []byte(";")) {
		part = bytes.TrimSpace(part)
		if len(part) > 0 && !(bytes.HasPrefix(part, []byte("--")) && !bytes.ContainsRune(part, '\n')) {
			n++
		}
	}
	return n
}

// TestSimpleStatements pins the counter the statement budget relies on.
func TestSimpleStatements(t *testing.T) {
	for sql, want := range map[string]int{"": 0, "BEGIN": 1, "ROLLBACK; SELECT pg_advisory_unlock(1)": 2, " ; ;SELECT 1;": 1, "-- ping": 0} {
		if got := simpleStatements([]byte(sql)); got != want {
			t.Errorf("simpleStatements(%q) = %d, want %d", sql, got, want)
		}
	}
}
