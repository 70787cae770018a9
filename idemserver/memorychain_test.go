package idemserver

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMemoryChainDifferential drives the same random sequence of claims, checkpoints,
// completions, releases, expiries and purges through Memories that differ only in their
// scope hash (the real one, one shared by every scope, one that splits scopes into three
// chains) and requires identical answers from all: the collision chains never return another
// scope's record, lose one on release, purge or expiry, or miscount Len. It held.
func TestMemoryChainDifferential(t *testing.T) {
	ctx := context.Background()
	hashes := []func(maphash.Seed, Scope) uint64{
		scopeHash,
		func(maphash.Seed, Scope) uint64 { return 42 },
		func(_ maphash.Seed, s Scope) uint64 { return uint64(len(s.Key) % 3) },
	}
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 7))
		mems := make([]*Memory, len(hashes))
		claims := make([]map[int]Claim, len(hashes))
		for i, h := range hashes {
			mems[i] = NewMemory()
			mems[i].hash = h
			claims[i] = map[int]Claim{}
		}
		scopes := []Scope{}
		for i := range 7 {
			scopes = append(scopes, Scope{Tenant: "t", Operation: "POST /x", Key: strings.Repeat("k", i+1)})
		}
		scopes = append(scopes, Scope{Tenant: "u", Operation: "POST /x", Key: "k"}, Scope{Tenant: "t", Operation: "POST /y", Key: "k"})
		now := time.Unix(1_700_000_000, 0)
		nextClaim := 0
		for step := range 400 {
			results := make([]string, len(mems))
			op := r.IntN(8)
			sc := r.IntN(len(scopes))
			fp := []byte{byte(r.IntN(2))}
			if r.IntN(3) == 0 {
				fp = bytes.Repeat(fp, 32) // the record's own array
			}
			pick := r.IntN(nextClaim + 1)
			status := 200 + r.IntN(5)
			retention := time.Duration(r.IntN(4)) * time.Second
			limit := r.IntN(3)
			if op == 7 {
				now = now.Add(time.Duration(r.IntN(3)) * time.Second)
			}
			for i, m := range mems {
				var res string
				switch op {
				case 0, 1: // claim
					c, rec, err := m.Claim(ctx, ClaimRequest{Scope: scopes[sc], Fingerprint: fp, Now: now, Lease: time.Second})
					if c != nil {
						claims[i][nextClaim] = c
						res = fmt.Sprintf("claim #%d expired=%v point=%q", nextClaim, c.ExpiredReuse(), c.RecoveryPoint())
					} else {
						res = fmt.Sprintf("record %s %v", recString(rec), err)
					}
				case 2: // complete
					if c := claims[i][pick]; c != nil {
						resp := &Response{StatusCode: status, Header: http.Header{"X": {fmt.Sprint(pick)}}, Body: []byte(fmt.Sprint("b", pick))}
						res = fmt.Sprint(c.Complete(ctx, resp, now, now.Add(retention)))
					}
				case 3: // release
					if c := claims[i][pick]; c != nil {
						res = fmt.Sprint(c.Release(ctx))
					}
				case 4: // checkpoint
					if c := claims[i][pick]; c != nil {
						res = fmt.Sprint(c.Checkpoint(ctx, fmt.Sprint("p", step), now, time.Second))
					}
				case 5: // a partial purge: n due records go, every other record stays
					before := snapshotAll(t, m, scopes, now)
					due := 0
					for _, s := range scopes {
						if rec := rawRecord(m, s); rec != nil && rec.State == StateCompleted && !now.Before(rec.ExpiresAt) {
							due++
						}
					}
					lenBefore := m.Len()
					n, err := m.Purge(ctx, now, limit)
					if err != nil || n != min(limit, due) || m.Len() != lenBefore-n {
						t.Fatalf("seed %d step %d mem %d: purge(%d) = %d %v with %d due; Len %d -> %d", seed, step, i, limit, n, err, due, lenBefore, m.Len())
					}
					if after := snapshotAll(t, m, scopes, now); after != before {
						t.Fatalf("seed %d step %d mem %d: a purge changed what Lookup sees:\n%s\n%s", seed, step, i, before, after)
					}
					res = "purged" // then all due ones, so the memories agree again
					fallthrough
				case 6:
					n, err := m.Purge(ctx, now, math.MaxInt)
					res += fmt.Sprint(" purge ", err, n > 0 || op == 5)
				}
				results[i] = res + " | " + snapshotAll(t, m, scopes, now) + fmt.Sprint(" len=", m.Len())
			}
			if op == 0 || op == 1 {
				nextClaim++
			}
			for i := range results[1:] {
				if results[i+1] != results[0] {
					t.Fatalf("seed %d step %d op %d: hash %d gives\n%s\nthe real hash gives\n%s", seed, step, op, i+1, results[i+1], results[0])
				}
			}
		}
	}
}

// rawRecord is the record Memory holds for s, expired or not (nil when none).
func rawRecord(m *Memory, s Scope) *memRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, _ := m.find(s)
	return r
}

func recString(rec *Record) string {
	if rec == nil {
		return "nil"
	}
	resp := "nil"
	if rec.Response != nil {
		resp = fmt.Sprintf("%d %v %q", rec.Response.StatusCode, rec.Response.Header, rec.Response.Body)
	}
	return fmt.Sprintf("{%x %v %s %q %v %v %v}", rec.Fingerprint, rec.State, resp, rec.RecoveryPoint,
		rec.CreatedAt.Unix(), rec.LockedUntil.Unix(), rec.ExpiresAt.Unix())
}

func snapshotAll(t *testing.T, m *Memory, scopes []Scope, now time.Time) string {
	var b strings.Builder
	for _, s := range scopes {
		rec, err := m.Lookup(context.Background(), s, now)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(recString(rec))
	}
	return b.String()
}

// TestAnswerEncodingShapes encodes answers the fuzz target cannot shape: many header
// fields, lengths and counts across the varint boundaries (127/128, 16383/16384), extreme
// status codes, binary and large bodies, and checks Memory's copies are independent of the
// handed-over Response and of each other. It held.
func TestAnswerEncodingShapes(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	lens := []int{0, 1, 127, 128, 129, 16383, 16384, 70000}
	for i := range 200 {
		resp := &Response{StatusCode: []int{0, 100, 200, 999, -1, math.MaxInt, math.MinInt}[i%7]}
		if i%5 != 0 {
			resp.Header = http.Header{}
			for k := range r.IntN(40) {
				name := fmt.Sprintf("X-%d-%s", k, strings.Repeat("n", lens[r.IntN(len(lens)-1)]))
				switch r.IntN(4) {
				case 0:
					resp.Header[name] = nil
				case 1:
					resp.Header[name] = []string{}
				default:
					vs := make([]string, r.IntN(3)+r.IntN(2)*128)
					for j := range vs {
						vs[j] = strings.Repeat("\x00\xff", lens[r.IntN(4)]/2)
					}
					resp.Header[name] = vs
				}
			}
		}
		if i%3 != 0 {
			resp.Body = make([]byte, lens[r.IntN(len(lens))])
			for j := range resp.Body {
				resp.Body[j] = byte(r.Uint32())
			}
		} else if i%2 == 0 {
			resp.Body = []byte{}
		}
		want := answerCopy(resp)
		if got := decodeAnswer(encodeAnswer(resp)); !reflect.DeepEqual(got, want) {
			t.Fatalf("answer %d: decoded differs", i)
		}
		m := NewMemory()
		ctx := context.Background()
		now := time.Unix(1_700_000_000, 0)
		s := Scope{Tenant: "t", Operation: "POST /x", Key: fmt.Sprint(i)}
		c, _, err := m.Claim(ctx, ClaimRequest{Scope: s, Fingerprint: []byte{1}, Now: now, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Complete(ctx, resp, now, now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		// The caller and the first reader scribble on what they hold.
		for k := range resp.Header {
			resp.Header[k] = append(resp.Header[k], "changed")
		}
		resp.Body = append(resp.Body[:0:0], 'z')
		first, _ := m.Lookup(ctx, s, now)
		if first.Response != nil && first.Response.Header != nil {
			first.Response.Header["Injected"] = []string{"x"}
			if len(first.Response.Body) > 0 {
				first.Response.Body[0] ^= 0xff
			}
		}
		second, _ := m.Lookup(ctx, s, now)
		if !reflect.DeepEqual(second.Response, want) {
			t.Fatalf("answer %d: a later Lookup is not the answer as completed", i)
		}
	}
}

// TestOperationConcurrent calls the default Operation from many goroutines with
// methods and paths that differ in one byte or only in where the space falls: it must return
// exactly r.Method + " " + r.URL.Path every time (never another route's cached string), and
// with -race show no race. It held.
func TestOperationConcurrent(t *testing.T) {
	cfg, err := Config{Backend: NewMemory(), Tenant: func(*http.Request) (string, error) { return "t", nil }}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	reqs := []*http.Request{}
	for _, mp := range [][2]string{
		{"POST", "/v1/payments"}, {"POST", "/v1/paymentt"}, {"POST", "/v1/payments/"}, {"PUT", "/v1/payments"},
		{"POST", "/v1/payment"}, {"POS", "T /v1/payments"}, {"POST ", "/v1/payments"}, {"POST", " /v1/payments"},
		{"POST", ""}, {"", "POST /v1/payments"}, {"post", "/v1/payments"}, {"POST", "/v1/payments\x00"},
	} {
		r, _ := http.NewRequest(http.MethodGet, "http://h/", nil)
		r.Method, r.URL.Path = mp[0], mp[1]
		reqs = append(reqs, r)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rr := rand.New(rand.NewPCG(uint64(g), 1))
			for range 5000 {
				r := reqs[rr.IntN(len(reqs))]
				if got, want := cfg.Operation(r), r.Method+" "+r.URL.Path; got != want {
					errs <- fmt.Errorf("Operation(%q %q) = %q", r.Method, r.URL.Path, got)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}
