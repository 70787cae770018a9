package idemserver

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestMemoryChain drives records that all share one hash through every way a record leaves
// or replaces another (release, purge with a limit, a claim after expiry), checking after
// each step that every scope finds its own record and Len counts them.
func TestMemoryChain(t *testing.T) {
	for _, colliding := range []bool{true, false} {
		t.Run(fmt.Sprint("colliding=", colliding), func(t *testing.T) {
			m := NewMemory()
			if colliding {
				m = NewMemoryColliding()
			}
			ctx := context.Background()
			now := time.Unix(1_700_000_000, 0)
			scope := func(i int) Scope { return Scope{Tenant: "t", Operation: "POST /x", Key: fmt.Sprint("k", i)} }
			claims := map[int]Claim{}
			const n = 8
			for i := range n {
				c, rec, err := m.Claim(ctx, ClaimRequest{Scope: scope(i), Fingerprint: []byte{byte(i)}, Now: now, Lease: time.Minute})
				if err != nil || rec != nil || c == nil {
					t.Fatalf("claim %d: %v %v %v", i, c, rec, err)
				}
				claims[i] = c
			}
			// Even keys complete, with expiry i seconds from now; odd keys 1 and 5 are released.
			for i := 0; i < n; i += 2 {
				resp := &Response{StatusCode: 200 + i, Header: http.Header{}, Body: []byte(fmt.Sprint("body", i))}
				if err := claims[i].Complete(ctx, resp, now, now.Add(time.Duration(i+1)*time.Second)); err != nil {
					t.Fatal(err)
				}
			}
			for _, i := range []int{1, 5} {
				if err := claims[i].Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			check := func(step string, want map[int]int) { // key -> status (0: processing), absent: none
				t.Helper()
				if m.Len() != len(want) {
					t.Fatalf("%s: Len %d, want %d", step, m.Len(), len(want))
				}
				for i := range n + 1 {
					rec, err := m.Lookup(ctx, scope(i), now)
					if err != nil {
						t.Fatal(err)
					}
					st, ok := want[i]
					switch {
					case !ok && rec != nil:
						t.Fatalf("%s: key %d has a record", step, i)
					case ok && rec == nil:
						t.Fatalf("%s: key %d has none", step, i)
					case ok && st == 0 && rec.State != StateProcessing:
						t.Fatalf("%s: key %d is %v, want processing", step, i, rec.State)
					case ok && st != 0 && (rec.Response == nil || rec.Response.StatusCode != st || string(rec.Response.Body) != fmt.Sprint("body", st-200)):
						t.Fatalf("%s: key %d answer %+v, want status %d", step, i, rec.Response, st)
					case ok && rec.Fingerprint[0] != byte(i):
						t.Fatalf("%s: key %d has key %d's fingerprint", step, i, rec.Fingerprint[0])
					}
				}
			}
			check("claimed", map[int]int{0: 200, 2: 202, 3: 0, 4: 204, 6: 206, 7: 0})
			// At now+3s keys 0 and 2 have expired: a limit of 1 purges one of them.
			if got, err := m.Purge(ctx, now.Add(3*time.Second), 1); err != nil || got != 1 {
				t.Fatalf("purge: %d %v", got, err)
			}
			if m.Len() != 5 {
				t.Fatalf("after a purge of 1: Len %d", m.Len())
			}
			// Key 4 expires at now+5s: claimed again then, it replaces its old record.
			later := now.Add(5 * time.Second)
			c, rec, err := m.Claim(ctx, ClaimRequest{Scope: scope(4), Fingerprint: []byte{4}, Now: later, Lease: time.Minute})
			if err != nil || rec != nil || !c.ExpiredReuse() {
				t.Fatalf("claim after expiry: %v %v %v", c, rec, err)
			}
			if got, err := m.Purge(ctx, later, 10); err != nil || got != 1 {
				t.Fatalf("purge the rest: %d %v", got, err)
			}
			now = later
			check("after expiry", map[int]int{3: 0, 4: 0, 6: 206, 7: 0})
			for _, cl := range []Claim{c, claims[3], claims[7]} {
				if err := cl.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			check("released", map[int]int{6: 206})
		})
	}
}
